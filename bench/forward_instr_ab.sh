#!/usr/bin/env bash
# forward_instr_ab.sh: the instructions one model's forwards execute, two
# builds side by side (callgrind, one thread): a change that leaves the
# forward's work alone shows the same count, however noisy the machine's
# timings are. Each build is a tree's build folder (TREE/build/CFG) with its
# libmantissa.a; bench/forward_instr.c is compiled against it with that
# tree's headers, so a tree older than the program can be measured too.
#
#   bench/forward_instr_ab.sh BEFORE_BUILD AFTER_BUILD [MODEL_DIR] [PRECISION]
#   e.g. bench/forward_instr_ab.sh /tmp/base/build/release build/release
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2 model=${3:-models/all-MiniLM-L6-v2} prec=${4:-fp32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libs="-lmicrohttpd -lcjson -luv -lpthread -ldl -lrt -lcurl -ldnnl -lm -lgrpc -lgpr -lprotobuf-c"
for side in before after; do
  dir=${!side}
  tree=$(cd "$dir/../.." && pwd)
  # shellcheck disable=SC2086
  cc -std=c11 -D_GNU_SOURCE -O2 -g -fopenmp -I"$tree" -I/usr/include/cjson \
    bench/forward_instr.c "$dir/libmantissa.a" $libs -o "$work/$side.bin"
  OMP_NUM_THREADS=1 valgrind --tool=callgrind --toggle-collect=enc_forward \
    --callgrind-out-file="$work/$side.cg" "$work/$side.bin" "$model" "$prec" \
    > "$work/$side.out" 2> "$work/$side.err" || { tail -5 "$work/$side.err"; exit 1; }
  n=$(awk '/^totals:/ {print $2}' "$work/$side.cg")
  printf '%-7s %-40s %15s instructions in 20 forwards; sum of first values %s\n' \
    "$side" "$dir" "$n" "$(cat "$work/$side.out")"
done
