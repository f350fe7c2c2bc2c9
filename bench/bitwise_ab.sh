#!/usr/bin/env bash
# bitwise_ab.sh: whether a refactoring left the vectors alone. Embeds the
# first N STS-B test sentences (both columns) with two mantissa binaries,
# for each model folder and precision, at each instruction-set level this
# CPU steps down to, and compares the printed vectors byte for byte
# (mantissa embed prints every float with all its digits). Prints one line
# per case, "same" or "DIFFERENT", and exits 1 if any differs.
#
#   bench/bitwise_ab.sh BEFORE_BIN AFTER_BIN [MODEL_DIR ...]
#   N=200 PRECISIONS="fp32 int8" LEVELS="avx2" bench/bitwise_ab.sh ...
#
# MODEL_DIR defaults to models/all-MiniLM-L6-v2 and models/all-mpnet-base-v2.
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2
shift 2
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(models/all-MiniLM-L6-v2 models/all-mpnet-base-v2)
N=${N:-200}
PRECISIONS=${PRECISIONS:-"fp32 fp16 bf16 int8 int8g fp8"}
LEVELS=${LEVELS:-$("$after" cpu --levels)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -n "$N" ../shared/data/stsb/sts-test.csv | cut -f6,7 | tr '\t' '\n' > "$work/texts"
bad=0
for dir in "${dirs[@]}"; do
  for p in $PRECISIONS; do
    cat > "$work/cfg.json" <<JSON
{"server": {"listen": "127.0.0.1:0"},
 "models": [{"name": "m", "path": "$dir", "device": "cpu",
             "variants": [{"name": "v", "precision": "$p", "traffic": 100}]}]}
JSON
    for lv in $LEVELS; do
      for side in before after; do
        bin=$before; [ $side = after ] && bin=$after
        ONEDNN_MAX_CPU_ISA=$lv "$bin" embed --config "$work/cfg.json" --model m \
          < "$work/texts" > "$work/$side" 2> "$work/$side.err" || { cat "$work/$side.err"; exit 2; }
      done
      if cmp -s "$work/before" "$work/after"; then r=same; else r=DIFFERENT; bad=1; fi
      printf '%-28s %-6s %-18s %s (%s vectors)\n' "$(basename "$dir")" "$p" "$lv" "$r" \
        "$(wc -l < "$work/after")"
    done
  done
done
exit $bad
