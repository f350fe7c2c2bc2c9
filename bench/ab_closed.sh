#!/bin/bash
# ab_closed.sh: two server binaries, closed loop, side by side: for fp32 and
# int8g, each round starts each binary in turn (the order alternating by
# round), warms it at concurrency 16, then measures concurrency 16 and 64
# (bench/loadgen, one STS-B sentence per request, MiniLM, batching 64 / no
# delay). Prints one line per point, then the medians and the paired ratios.
# A quicker and tighter check of closed-loop throughput than
# bench/oneloop_ab.py, whose open-loop points take most of its time.
#
#   bench/ab_closed.sh BIN_A BIN_B [ROUNDS=5] [SECONDS=5] [PORT=18090]
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1 B=$2 R=${3:-5} S=${4:-5} PORT=${5:-18090}
LOADGEN=build/release/bench/loadgen
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python - "$tmp/bodies.txt" <<'EOF'
import json, sys
sys.path.insert(0, "bench")
import peers_bench as pb
with open(sys.argv[1], "w") as f:
    for s in pb.stsb()[0]:
        f.write(json.dumps({"model": "minilm", "input": s}) + "\n")
EOF
for prec in fp32 int8g; do
  cat > "$tmp/c.json" <<EOF
{"server": {"listen": "127.0.0.1:$PORT", "log_level": "warn", "max_inputs": 64},
 "models": [{"name": "minilm", "path": "models/all-MiniLM-L6-v2",
   "batching": {"max_batch_size": 64, "max_batch_tokens": 16384, "max_queue_delay_us": 0},
   "variants": [{"name": "$prec", "precision": "$prec"}]}]}
EOF
  for r in $(seq "$R"); do
    if [ $((r % 2)) = 1 ]; then order="a b"; else order="b a"; fi
    for which in $order; do
      bin=$A; [ "$which" = b ] && bin=$B
      "$bin" serve --config "$tmp/c.json" > "$tmp/srv.log" 2>&1 &
      pid=$!
      for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$PORT/v2/health/ready" > /dev/null 2>&1 && break
        sleep 0.1
      done
      $LOADGEN --port "$PORT" --bodies "$tmp/bodies.txt" --seconds 1.5 --concurrency 16 > /dev/null
      for c in 16 64; do
        $LOADGEN --port "$PORT" --bodies "$tmp/bodies.txt" --seconds "$S" --concurrency $c |
          tail -1 | .venv/bin/python -c 'import json,sys; d=json.load(sys.stdin); print(sys.argv[1], sys.argv[2], sys.argv[3], d["rps"], d["p50_ms"], d["p99_ms"])' "$prec" "c=$c" "$which"
      done
      kill "$pid"
      wait "$pid" || true
    done
  done
done | tee "$tmp/points.txt"
.venv/bin/python - "$tmp/points.txt" "$A" "$B" <<'EOF'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p, c, w, rps, p50, p99 = line.split()
    d[(p, c, w)].append(float(rps))
print("\na = %s, b = %s: requests/s, medians of the rounds; b/a per round" % (sys.argv[2], sys.argv[3]))
for p in ("fp32", "int8g"):
    for c in ("c=16", "c=64"):
        a, b = d[(p, c, "a")], d[(p, c, "b")]
        print("%s %s: a %.0f, b %.0f, b/a %.3f (rounds: %s)" % (
            p, c, statistics.median(a), statistics.median(b),
            statistics.median(b) / statistics.median(a),
            ", ".join("%.3f" % (y / x) for x, y in zip(a, b))))
EOF
