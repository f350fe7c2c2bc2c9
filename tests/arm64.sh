#!/usr/bin/env bash
# arm64.sh: the unit tests of an arm64 build (make test-arm64: build/arm64)
# under qemu-user, twice: as a CPU with the ARMv8.2 dot product (qemu's
# "max": the int8 kernels' sdot form) and as an ARMv8.0 one (Cortex-A72:
# their 16-bit form), so that both int8 forms are checked against their
# double-precision twins and against each other bit for bit. The tests'
# timing-only parts are skipped and their largest grids cut down there
# (MANTISSA_EMULATED: under emulation a GEMM is ~50x slower). Ends with
# "arm64 tests: N passed, N failed" and a non-zero status on any failure.
# ARM64_TESTS (names, space-separated) chooses the programs (default: every
# unit test but test_mpnet, test_mix_model and test_distilbert, whose MPNet
# forwards, mix searches and a dozen MiniLM loads take hours under emulation; test_bert checks every precision of
# MiniLM end to end against FP32 there); ARM64_CPUS the CPUs. Check's
# per-test timeouts are stretched (CK_TIMEOUT_MULTIPLIER, default 8).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/arm64}
QEMU=${QEMU:-qemu-aarch64}
# the arm64 libraries are the multiarch ones (/lib/aarch64-linux-gnu): the
# cross compiler's /usr/aarch64-linux-gnu holds an older libc whose ld.so
# does not match them (a QEMU_LD_PREFIX there hangs in the first pthread_create)
export MANTISSA_EMULATED=1 CK_FORK=yes CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-8}
cpus=${ARM64_CPUS:-max cortex-a72}
tests=${ARM64_TESTS:-$(cd "$BUILD/tests" && ls test_* 2>/dev/null | grep -vxE 'test_mpnet|test_mix_model|test_distilbert')}
pass=0; fail=0; failed=()
. tests/run_unit.sh
for cpu in $cpus; do
  for t in $tests; do
    [ -x "$BUILD/tests/$t" ] || continue
    run_unit "$t on qemu -cpu $cpu" "$QEMU" -cpu "$cpu" "$BUILD/tests/$t"
  done
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failing: ${failed[*]}"
echo "arm64 tests: $pass passed, $fail failed"
[ $fail -eq 0 ] && [ ${#failed[@]} -eq 0 ]
