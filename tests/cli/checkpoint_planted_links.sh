# Symbolic links planted in a checkpoint directory by someone sharing it are
# refused naming them, never followed (~2 s):
#   - [train] checkpoint_dir's lock DIR/tessera.lock is truncated and written:
#     a link planted there had its target overwritten with "host H pid P";
#     now the run is refused and the target keeps its bytes (a FIFO there is
#     refused too);
#   - tessera reshard --out DIR writes DIR.tmp.dir and renames it: a link
#     planted at DIR.tmp.dir (to a directory of someone's files) had every
#     file it leads to removed (the temporary directory was emptied through
#     the link); now refused, the files stay; once the link is gone the
#     reshard writes DIR.
# Usage: checkpoint_planted_links.sh TESSERA SRC
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
mkdir ck
echo "someone's data" > victim.txt
ln -s ../victim.txt ck/tessera.lock
"$TESSERA" train tr.ini > train.txt 2>&1 && { cat train.txt; fail "train with a link at the lock"; }
grep -q 'cannot create the lock ck/tessera.lock: it is a symbolic link' train.txt ||
    { cat train.txt; fail "the refusal does not name the lock"; }
[ "$(cat victim.txt)" = "someone's data" ] || fail "the lock's link target was overwritten: $(cat victim.txt)"
[ -L ck/tessera.lock ] || fail "the planted lock link was removed"
echo "ok lock link refused: $(cat train.txt)"
rm ck/tessera.lock
mkfifo ck/tessera.lock
timeout 20 "$TESSERA" train tr.ini > train.txt 2>&1 && { cat train.txt; fail "train with a FIFO at the lock"; }
grep -q 'the lock ck/tessera.lock is not a regular file' train.txt ||
    { cat train.txt; fail "a FIFO at the lock: $(cat train.txt)"; }
rm ck/tessera.lock
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
