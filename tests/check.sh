#!/usr/bin/env bash
# check.sh: make check, the quick loop of a developer: every unit test
# program (build/<cfg>/tests/test_*) once, at this CPU's own instruction-set
# level, as many at a time as there are cores (CHECK_JOBS), then the source
# tree's structure checks (tests/structure). No ISA matrix and no
# integration tests: make test runs those. Ends with one line
# "check: N passed, N failed" and a non-zero status on any failure.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
PYTHON=${PYTHON:-.venv/bin/python}
export CK_FORK=${CK_FORK:-yes}
jobs=${CHECK_JOBS:-$(nproc)}
pass=0; fail=0; skip=0; failed=()
. tests/run_unit.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Longest first, by the last run's times ($BUILD/tests/.check-times), so
# that the slow suites do not end up running alone at the end.
times="$BUILD/tests/.check-times"
progs=()
while read -r t; do
  [ -x "$t" ] && progs+=("$t")
done < <(for t in "$BUILD"/tests/test_*; do
           printf '%s %s\n' "$(awk -v n="$(basename "$t")" '$1 == n {print $2}' "$times" 2>/dev/null | tail -1)" "$t"
         done | sort -k1,1nr -k2 | awk '{print $NF}')
if [ ${#progs[@]} -eq 0 ]; then
  echo "check: no unit test programs in $BUILD/tests (build them: make unit-bins)" >&2
  exit 1
fi
# Each program writes its output and status to $tmp; at most $jobs at once.
# With more than one at a time their OpenMP teams share the cores, so idle
# team threads sleep instead of spinning (the team sizes stay the
# default: test_cpu_ops checks that the backend changes it).
[ "$jobs" -gt 1 ] && export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
start=$(date +%s)
for t in "${progs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  n=$(basename "$t")
  ( s=$(date +%s%N); "$t" >"$tmp/$n.out" 2>&1; echo $? >"$tmp/$n.rc"
    echo "$n $(( ($(date +%s%N) - s) / 1000000 ))" >"$tmp/$n.ms" ) &
done
wait
for t in "${progs[@]}"; do
  n=$(basename "$t")
  echo "== $t"
  out=$(cat "$tmp/$n.out"); printf '%s\n' "$out"
  count_unit "$t" "$out" "$(cat "$tmp/$n.rc" 2>/dev/null || echo 1)"
done
cat "$tmp"/*.ms > "$times" 2>/dev/null
echo "unit tests: $(( $(date +%s) - start )) s, $jobs at a time (longest: $(sort -k2,2nr "$times" | head -3 | awk '{printf "%s%s %.0f s", (NR > 1 ? ", " : ""), $1, $2 / 1000}'))"

run_pytest tests/structure tests/structure

echo
[ ${#failed[@]} -gt 0 ] && echo "failing: ${failed[*]}"
echo "check: $pass passed, $fail failed"
[ $fail -eq 0 ] && [ ${#failed[@]} -eq 0 ]
