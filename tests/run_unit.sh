# run_unit.sh: sourced by tests/run.sh, tests/check.sh and tests/arm64.sh.
# run_unit LABEL COMMAND... runs one check program, prints its output and
# adds its checks to the caller's pass and fail counts (a program that fails
# without check's summary line counts as one failure), and LABEL to failed[]
# when it exits non-zero. count_unit LABEL OUTPUT RC does the counting for a
# program already run (tests/check.sh runs several at once).
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
