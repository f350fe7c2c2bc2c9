#!/usr/bin/env bash
# repeat_under_load.sh: runs one pytest test N times with a busy loop on
# every core beside it, and counts the failures: how a race that shows up
# on a loaded machine (and hides on an idle one) is found, and how a fix is
# shown. MANTISSA_BIN picks the binary (default build/release/mantissa).
#
#   tests/repeat_under_load.sh tests/integration/test_serving.py::test_draining_server_is_unready_and_answers_new_requests_503 30
set -u
cd "$(dirname "$0")/.."
TEST=${1:?a pytest node id}
N=${2:-30}
PY=${PYTHON:-.venv/bin/python}
busy=()
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT
pass=0; fail=0
for i in $(seq "$N"); do
  if out=$("$PY" -m pytest -q -x "$TEST" 2>&1); then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "run $i failed:"
    printf '%s\n' "$out" | grep -E '^E ' | head -5
  fi
done
echo "$TEST: $pass passed, $fail failed of $N, $(nproc) busy loops beside it (${MANTISSA_BIN:-build/release/mantissa})"
[ "$fail" -eq 0 ]
