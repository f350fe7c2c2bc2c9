#!/usr/bin/env bash
# run.sh: `make test-gpu`: runs every tests/gpu program ($BUILD/tests/gpu/test_*),
# in this process tree without forking runners (CUDA contexts must not cross a
# fork), and sums their "<suite>: N passed, N failed, N skipped" lines. Where
# there is no CUDA device each program prints "SKIP: no CUDA device" and passes.
#
# Environment: BUILD (build/release), GPU_TEST_ARGS (extra arguments, e.g. --quick),
# MODEL_ARGS (extra arguments for test_gpu_model, e.g. --model DIR --ref FILE).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/release}
export CK_FORK=no
pass=0; fail=0; skip=0; failed=()
for t in "$BUILD"/tests/gpu/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.o|*.d) continue ;; esac
  args=(${GPU_TEST_ARGS:-})
  [ "$(basename "$t")" = test_gpu_model ] && args+=(${MODEL_ARGS:-})
  echo "== $t ${args[*]:-}"
  out=$("$t" "${args[@]}" 2>&1); rc=$?
  printf '%s\n' "$out"
  line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' | tail -1)
  if [ -n "$line" ]; then
    p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
    f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    s=$(sed -E 's/.* ([0-9]+) skipped$/\1/' <<<"$line")
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  else
    fail=$((fail + 1))
  fi
  [ $rc -ne 0 ] && failed+=("$t")
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failing: ${failed[*]}"
echo "tests/gpu: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ ${#failed[@]} -eq 0 ]
