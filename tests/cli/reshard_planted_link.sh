# tessera reshard --out DIR writes DIR.tmp.dir and renames it: a symbolic
# link planted at DIR.tmp.dir (to a directory of someone's files) is refused
# naming it and the files it leads to stay (they were all removed: the
# temporary directory was emptied through the link); once the link is gone
# the reshard writes DIR (~2 s).
# Usage: reshard_planted_link.sh TESSERA SRC
. "$2/tests/cli/multirank.sh"
cat > tr.ini <<'INI'
[model]
layers = 1
d_model = 32
heads = 2
vocab = 64
context = 16
[data]
source = synthetic
synthetic_tokens = 4096
[train]
steps = 1
seq_len = 16
micro_batch = 2
global_batch = 2
checkpoint_dir = ck
checkpoint_every = 1
INI
"$TESSERA" train tr.ini > train.txt 2>&1 || { cat train.txt; fail "train"; }
mkdir theirs
echo important > theirs/a.txt
echo also > theirs/b.bin
ln -s theirs out.tmp.dir
"$TESSERA" reshard tr.ini --checkpoint ck/ckpt-00000001 --out out > rs.txt 2>&1 &&
    { cat rs.txt; fail "reshard through a planted link succeeded"; }
grep -q 'out.tmp.dir: is a symbolic link or not a directory: refusing to remove it' rs.txt ||
    { cat rs.txt; fail "the refusal does not name the link"; }
[ "$(cat theirs/a.txt)" = important ] && [ -f theirs/b.bin ] ||
    fail "the files the planted link leads to were removed: $(ls theirs)"
[ -L out.tmp.dir ] && [ ! -e out ] || fail "the link was replaced or out written"
echo "ok planted link refused: $(cat rs.txt)"
rm out.tmp.dir
"$TESSERA" reshard tr.ini --checkpoint ck/ckpt-00000001 --out out > rs.txt 2>&1 ||
    { cat rs.txt; fail "reshard"; }
[ -f out/COMPLETE ] || fail "out has no COMPLETE"
echo PASS
