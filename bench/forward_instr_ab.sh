#!/usr/bin/env bash
# forward_instr_ab.sh: the instructions one model's forwards execute, two
# builds side by side (callgrind, one thread): a change that leaves the
# forward's work alone shows the same count, however noisy the machine's
# timings are. Each build is a tree's build folder with bench/forward_instr
# (make all builds it).
#
#   bench/forward_instr_ab.sh BEFORE_BUILD AFTER_BUILD [MODEL_DIR] [PRECISION]
#   e.g. bench/forward_instr_ab.sh /tmp/base/build/release build/release
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2 model=${3:-models/all-MiniLM-L6-v2} prec=${4:-fp32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in before after; do
  dir=${!side}
  OMP_NUM_THREADS=1 valgrind --tool=callgrind --toggle-collect=enc_forward \
    --callgrind-out-file="$work/$side.cg" "$dir/bench/forward_instr" "$model" "$prec" \
    > "$work/$side.out" 2> "$work/$side.err" || { tail -5 "$work/$side.err"; exit 1; }
  n=$(awk '/^totals:/ {print $2}' "$work/$side.cg")
  printf '%-7s %-40s %15s instructions in 20 forwards; sum of first values %s\n' \
    "$side" "$dir" "$n" "$(cat "$work/$side.out")"
done
