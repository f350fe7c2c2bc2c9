#!/usr/bin/env bash
# run.sh: runs every test: the check unit suites (one program per module,
# build/<cfg>/tests/test_*; those that run GEMMs once more at every lower
# instruction-set level of this CPU) and the Python integration tests that start the
# real binary (tests/integration, pytest), with the tree's structure checks
# (tests/structure), and the CUDA kernels' index math emulated on the host
# (tests/gpu/*.py, pytest; the GPU programs are make test-gpu's). Ends with one line
# "tests: N passed, N failed, N skipped" summed over all of them.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
PYTHON=${PYTHON:-.venv/bin/python}
export MANTISSA_BIN=${MANTISSA_BIN:-$PWD/$BUILD/mantissa}
export CK_FORK=${CK_FORK:-yes}

pass=0; fail=0; skip=0; failed=()
. tests/run_unit.sh
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run_unit "$t" "$t"
done

# The ISA matrix: the tests that run a GEMM again at every lower
# instruction-set level this CPU can be stepped down to (mantissa cpu
# --levels; ONEDNN_MAX_CPU_ISA steps oneDNN and our kernels down together),
# so that a developer on an AMX or AVX-512 machine sees what a user on an
# AVX2 CPU gets. ISA_LEVELS (a space-separated list) narrows it.
ISA_TESTS=(test_qgemm test_bert test_mpnet test_mix_model test_quant test_cpu_ops test_cpu_layer_ops
           test_layer_kinds test_stream_ref)
levels=${ISA_LEVELS:-$("$MANTISSA_BIN" cpu --levels)}
top=$("$MANTISSA_BIN" cpu --levels | tail -1)
for lv in $levels; do
  [ "$lv" = "$top" ] && continue # the run above was at this CPU's own level
  for t in "${ISA_TESTS[@]}"; do
    [ -x "$BUILD/tests/$t" ] || continue
    run_unit "$BUILD/tests/$t at ISA $lv" env ONEDNN_MAX_CPU_ISA="$lv" "$BUILD/tests/$t"
  done
done

# the source tree's structure (layers, cycles, file headers, sizes), then
# the integration tests, in one pytest run
if [ -d tests/integration ] && ls tests/integration/test_*.py >/dev/null 2>&1; then
  run_pytest "tests/structure tests/integration" -rs tests/structure tests/integration
fi

# the CUDA kernels' index math emulated on the host (no GPU needed)
run_pytest "tests/gpu (host emulation)" tests/gpu

echo
[ ${#failed[@]} -gt 0 ] && echo "failing: ${failed[*]}"
echo "tests: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ ${#failed[@]} -eq 0 ]
