# cluster_lib.sh — what the plan tests share (sourced after lib.sh): a
# cluster file of A100-like figures, and a check of a command's exit status
# and message.

cluster_file() { # FILE GPUS_PER_NODE NODES MEMORY_GB [key=value ...]: the file, keys replaced or added
    local f=$1
    cat > $f <<INI
[cluster]
gpus_per_node = $2
nodes = $3
memory_gb = $4
flops_bf16 = 312e12
flops_fp32 = 19.5e12
matmul_efficiency = 0.75
attention_efficiency = 0.5
memory_bandwidth_gbs = 2039
kernel_us = 4
intra_bandwidth_gbs = 300
intra_latency_us = 10
inter_bandwidth_gbs = 25
inter_latency_us = 20
INI
    shift 4
    for kv in "$@"; do
        local k=${kv%%=*}
        if grep -q "^$k =" $f; then sed -i "s/^$k = .*/$k = ${kv#*=}/" $f; else echo "$k = ${kv#*=}" >> $f; fi
    done
}

expect_status() { # NAME RC LINES REGEX args...: `tessera args` exits RC, prints at most LINES lines, one matching REGEX
    local name=$1 want=$2 lines=$3 regex=$4
    shift 4
    "$TESSERA" "$@" > $name.txt 2>&1
    local rc=$?
    [ $rc -eq $want ] || { cat $name.txt; fail "$name: exit status $rc, not $want"; }
    grep -qE "$regex" $name.txt || { cat $name.txt; fail "$name: message does not match /$regex/"; }
    [ "$(grep -c . $name.txt)" -le $lines ] || { cat $name.txt; fail "$name: more than the error"; }
    echo "ok $name: $(grep -m1 -E "$regex" $name.txt)"
}
