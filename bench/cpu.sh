#!/usr/bin/env bash
# cpu.sh: `make bench`: Mantissa's CPU throughput against ONNX Runtime on
# the same weights and the same inputs, measured in the same run.
#
# 1. installs the peer's Python packages (tools/bench-requirements.txt) into .venv
# 2. builds the ONNX graph of the model from model.safetensors (tools/export-onnx.py),
#    checked against the committed sentence-transformers vectors
# 3. runs the peer (bench/peer_ort.py), which also writes the exact token ids it used
# 4. runs `mantissa bench` on those ids for each precision of config/precisions.json
# 5. runs both again in the other order (FP32 and INT8 on our side, the
#    precisions the peer has): each figure is the better of its two windows.
#    On a shared machine the speed drifts over the minute a pass takes, and
#    whichever side ran in the slower window would lose by that much (batch-1
#    ratios moved from 1.06x to 0.74x between single-pass runs of one day).
# 6. prints a markdown table per precision with the ratios, and writes it (plus
#    the raw JSON of both windows) to bench/results/cpu-precisions-<date>.md
#    when SAVE=1
#
# Environment: BUILD (build/release), PYTHON (.venv/bin/python), SECONDS_PER_POINT (3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
PY=${PYTHON:-.venv/bin/python}
SECS=${SECONDS_PER_POINT:-3}
MODEL=models/all-MiniLM-L6-v2
OUTDIR=build/peer
mkdir -p "$OUTDIR"

"$PY" -m pip install -q --disable-pip-version-check -r tools/bench-requirements.txt
if [ ! -s "$OUTDIR/minilm.onnx" ] || [ "$OUTDIR/minilm.onnx" -ot "$MODEL/model.safetensors" ]; then
  "$PY" tools/export-onnx.py "$OUTDIR/minilm.onnx" --model "$MODEL" >&2
fi

echo "bench: peer (ONNX Runtime, FP32 and dynamic INT8) ..." >&2
"$PY" bench/peer_ort.py "$OUTDIR/minilm.onnx" "$MODEL" --int8 --min-time "$SECS" \
  --dump-ids "$OUTDIR/ids.json" > "$OUTDIR/peer.json"
# every precision variant of config/precisions.json, one after the other
: > "$OUTDIR/mantissa.jsonl"
for v in fp32 fp16 bf16 int8 int8g fp8; do
  echo "bench: mantissa ($v) ..." >&2
  "$BUILD/mantissa" bench --config config/precisions.json --model "minilm@$v" \
    --ids "$OUTDIR/ids.json" --batch 1,32 --seconds "$SECS" >> "$OUTDIR/mantissa.jsonl"
done
# the second window, in the other order: ours first, then the peer
for v in int8 fp32; do
  echo "bench: mantissa ($v), second window ..." >&2
  "$BUILD/mantissa" bench --config config/precisions.json --model "minilm@$v" \
    --ids "$OUTDIR/ids.json" --batch 1,32 --seconds "$SECS" >> "$OUTDIR/mantissa.jsonl"
done
echo "bench: peer, second window ..." >&2
"$PY" bench/peer_ort.py "$OUTDIR/minilm.onnx" "$MODEL" --int8 --min-time "$SECS" \
  > "$OUTDIR/peer2.json"

CPU_BENCH_ISA=$("$BUILD/mantissa" cpu | sed -n 's/^isa: //p')
export CPU_BENCH_ISA
report=$("$PY" - "$OUTDIR/peer.json" "$OUTDIR/mantissa.jsonl" "$SECS" "$OUTDIR/peer2.json" <<'PY'
import json, os, sys, platform, subprocess, datetime
peers = [json.load(open(sys.argv[1])), json.load(open(sys.argv[4]))]
runs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ours = runs[0]
res = {}
for r in runs:  # the better of the windows a point was measured in
    for x in r["results"]:
        k = (r["precision"], x["batch"])
        res[k] = max(res.get(k, 0.0), x["sentences_per_s"])
peer = dict(peers[0])
for prec in ("fp32", "int8"):
    if prec in peers[0]:
        peer[prec] = {key: max(p.get(prec, {}).get(key) or 0.0 for p in peers)
                      for key in ("batch1_sps", "batch32_sps")}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print("# CPU throughput per precision: Mantissa vs ONNX Runtime\n")
print("- date: %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"))
print("- machine: %s, %d threads used by each side" % (cpu, ours["threads"]))
print("- command: `make bench` (bench/cpu.sh)")
isa = os.environ.get("CPU_BENCH_ISA", "?")
print("- instruction set: Mantissa at %s (`mantissa cpu`; `ONEDNN_MAX_CPU_ISA=AVX2 make bench` "
      "steps it down); ONNX Runtime at this CPU's own level (it has no switch to step down)"
      % isa)
print("- inputs: 32 sequences of 128 token ids (%s); the same ids for both" % peer.get("inputs", "see peer_ort.py"))
print("- peer: onnxruntime %s, graph from tools/export-onnx.py%s" % (peer.get("version", "?"),
      ", fused by onnxruntime.transformers.optimizer" if peer.get("fused", True) else ""))
print("- timing: median run time after warm-up, >= %s s per point, both sides; each figure the "
      "better of two windows (peer, ours, ours again for fp32 and int8, peer again), the rest once\n"
      % sys.argv[3])
print("| batch | precision | mantissa sentences/s | x mantissa fp32 | onnxruntime sentences/s (fp32 / dynamic int8) | mantissa / onnxruntime same precision |")
print("| --- | --- | --- | --- | --- | --- |")
for b, key in ((1, "batch1_sps"), (32, "batch32_sps")):
    for prec in ("fp32", "fp16", "bf16", "int8", "fp8"):
        if (prec, b) not in res:
            continue
        ours_s = res[(prec, b)]
        peer_s = peer.get(prec, {}).get(key)
        print("| %d | %s | %.1f | %.2fx | %s | %s |" % (
            b, prec, ours_s, ours_s / res[("fp32", b)],
            "%.1f" % peer_s if peer_s else "-",
            "%.2fx" % (ours_s / peer_s) if peer_s else "-"))
print("\nraw: mantissa %s\n\nraw: peer %s" % (json.dumps(runs), json.dumps(peers)))
PY
)
echo "$report"
if [ "${SAVE:-0}" = 1 ]; then
  f="bench/results/cpu-precisions-$(date -u +%Y-%m-%d)${ONEDNN_MAX_CPU_ISA:+-$(echo "$ONEDNN_MAX_CPU_ISA" | tr 'A-Z' 'a-z')}.md"
  echo "$report" > "$f"
  echo "bench: wrote $f" >&2
fi
