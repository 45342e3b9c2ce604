#!/bin/sh
# Builds one libFuzzer target with clang (ASan+UBSan) and runs it.
#   tests/fuzz/run.sh TARGET SECONDS [WORKDIR]
# CI runs each target for a short smoke time; a longer run is the same
# command with more seconds, e.g.  tests/fuzz/run.sh fuzz_request 3600
# Exits non-zero when the fuzzer finds a crash (the input is left in WORKDIR).
set -eu
target=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${3:-/tmp/ctxd-fuzz}
mkdir -p "$work/corpus-$target"
# proto/ decodes with msgpack-c (not instrumented: the system library).
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$root/proto" $(pkg-config --cflags msgpack) \
    "$here/$target.c" "$root"/proto/mem.c "$root"/proto/proto_*.c \
    $(pkg-config --libs msgpack) -o "$work/$target"
# Seeds: the golden vectors and the committed corpus.
cp "$root"/proto/vectors/*.msgpack "$root"/proto/vectors/bad/*.msgpack "$work/corpus-$target/"
cp "$here"/corpus/* "$work/corpus-$target/"
status=0
"$work/$target" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/corpus-$target" >"$work/$target.log" 2>&1 || status=$?
grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss)" "$work/$target.log" || true
if [ "$status" -ne 0 ]; then
    tail -n 60 "$work/$target.log"
    echo "$target: the fuzzer failed (exit $status)"
fi
exit "$status"
