# Every number on the command line of tessera plan and tessera verify is
# read whole and checked before it is cast: a fraction, a sign, an empty
# value, a word or a value past the range (past int too) is refused with one
# line naming the flag and the value, exit 2 (was: atoi/atof, so verify
# --world 2.5 ran 2 ranks and --steps 6.5 six steps; plan --rank '' was rank
# 0). tessera sample's numbers are checked in sample.sh.
# Usage: number_flags.sh TESSERA SRC
. "$(dirname "$0")/lib.sh"
TINY=$SRC/configs/tiny.ini
n=0
bad() { # NAME REGEX ARGS...: exit 2 with one line matching REGEX
    local name=$1 regex=$2
    shift 2
    timeout -s KILL 60 "$TESSERA" "$@" > $name.txt 2>&1
    local rc=$?
    [ $rc = 2 ] || { cat $name.txt; fail "$name: exit status $rc, expected 2"; }
    [ "$(wc -l < $name.txt)" = 1 ] && grep -qE -e "$regex" $name.txt ||
        { cat $name.txt; fail "$name: not one line matching /$regex/"; }
    n=$((n + 1))
    echo "ok $name: $(cat $name.txt)"
}
bad verify_world_fraction "verify: --world '2.5': a whole number from 1" verify "$TINY" --world 2.5
bad verify_world_empty "verify: --world '': a whole number" verify "$TINY" --world ""
bad verify_world_past_int "verify: --world '4294967298': a whole number" verify "$TINY" --world 4294967298
bad verify_steps_fraction "verify: --steps '6.5': a whole number from 4 to 1000" verify "$TINY" --world 2 --steps 6.5
bad verify_steps_negative "verify: --steps '-6': a whole number" verify "$TINY" --world 2 --steps -6
bad verify_timeout_word "verify: --timeout 'soon': a number in" verify "$TINY" --world 2 --timeout soon
bad verify_timeout_zero "verify: --timeout '0': a number in" verify "$TINY" --world 2 --timeout 0
bad verify_slow_rank_nan "verify: --slow-rank 'nan': a number in \[1," verify "$TINY" --world 2 --slow-rank nan
bad plan_world_fraction "--world '2.5': a whole number from 1" plan "$TINY" --world 2.5
bad plan_world_sign "--world '\+2': a whole number" plan "$TINY" --world +2
bad plan_rank_empty "--rank '': a whole number from 0" plan "$TINY" --world 1 --rank ""
bad plan_rank_past_int "--rank '4294967296': a whole number" plan "$TINY" --world 1 --rank 4294967296
bad plan_top_fraction "--top '1.5': a whole number from 1" plan "$TINY" --search --top 1.5
bad plan_jobs_negative "--jobs '-2': a whole number from 1" plan "$TINY" --search --jobs -2
echo "PASS ($n refused)"
