# run_unit.sh: sourced by tests/run.sh, tests/check.sh and tests/arm64.sh.
# run_unit LABEL COMMAND... runs one check program, prints its output and
# adds its checks to the caller's pass and fail counts (a program that fails
# without check's summary line counts as one failure), and LABEL to failed[]
# when it exits non-zero. count_unit LABEL OUTPUT RC does the counting for a
# program already run (tests/check.sh runs several at once). run_pytest
# LABEL ARGS... runs "$PYTHON -m pytest -q ARGS" and adds its passed,
# failed (errors too) and skipped counts to pass, fail and skip.
count_unit() {
  local label=$1 out=$2 rc=$3 line c f e
  # check's summary: "100%: Checks: 12, Failures: 0, Errors: 0"
  line=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks: ' | tail -1)
  if [ -n "$line" ]; then
    c=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
    e=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
    pass=$((pass + c - f - e)); fail=$((fail + f + e))
  fi
  if [ "$rc" -ne 0 ]; then
    [ -n "$line" ] || fail=$((fail + 1))
    failed+=("$label")
  fi
}

run_unit() {
  local label=$1 out rc
  shift
  echo "== $label"
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out"
  count_unit "$label" "$out" "$rc"
}

run_pytest() {
  local label=$1 out rc line p f s
  shift
  echo "== $label (pytest)"
  out=$("$PYTHON" -m pytest -q "$@" 2>&1); rc=$?
  printf '%s\n' "$out"
  line=$(printf '%s\n' "$out" | grep -E '(passed|failed|skipped|error)' | tail -1)
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
  f=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$line" | awk '{s+=$1} END{print s+0}')
  s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || true)
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0})); skip=$((skip + ${s:-0}))
  # 5: pytest collected no test
  if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then
    [ "${f:-0}" -gt 0 ] || fail=$((fail + 1))
    failed+=("$label")
  fi
}
