#!/usr/bin/env bash
# run.sh: runs the libFuzzer harnesses that `make fuzz` builds
# (build/fuzz/fuzz_*, clang + ASan + UBSan), each in two steps:
#   1. replay: every committed seed (tests/fuzz/corpus/<name>/) and every
#      saved finding (tests/fuzz/regressions/<name>/) once; any crash,
#      sanitizer report or broken check fails the target;
#   2. fuzz for FUZZ_SECONDS (default 30; 0 skips this step), growing the
#      gitignored working corpus tests/fuzz/corpus-work/<name>/ from the seeds.
# A finding is written to build/fuzz/findings/<name>/ (crash-*, timeout-*,
# oom-*); copy it into tests/fuzz/regressions/<name>/ once it is fixed, so
# step 1 keeps it fixed. <name> is the target without "fuzz_".
#
#   tests/fuzz/run.sh [fuzz_config ...]     (from make fuzz; default: all built)
#
# Ends with "fuzz: N passed, N failed" (one per target) and exits non-zero
# when any target failed.
set -u
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-build/fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
# A single input slower than this is a finding (a request that pins a thread).
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for b in "$FUZZ_BUILD"/fuzz_*; do [ -x "$b" ] && targets+=("$(basename "$b")"); done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no harness in $FUZZ_BUILD (run make fuzz)" >&2
  exit 1
fi

pass=0; fail=0; summary=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  bin=$FUZZ_BUILD/$t
  seeds=tests/fuzz/corpus/$name
  regs=tests/fuzz/regressions/$name
  work=tests/fuzz/corpus-work/$name
  findings=$FUZZ_BUILD/findings/$name
  log=$FUZZ_BUILD/logs/$t.log
  mkdir -p "$work" "$findings" "$(dirname "$log")"
  : > "$log"
  if [ ! -x "$bin" ]; then
    echo "== $t: $bin is not built"; fail=$((fail + 1)); summary+=("$t: not built"); continue
  fi
  dict=()
  [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
  ok=1

  # 1. replay the seeds (one process) and each saved finding (one process
  #    each, so that every one still failing is named)
  seedfiles=()
  [ -d "$seeds" ] && while IFS= read -r f; do seedfiles+=("$f"); done < <(find "$seeds" -type f | sort)
  regfiles=()
  [ -d "$regs" ] && while IFS= read -r f; do regfiles+=("$f"); done < <(find "$regs" -type f ! -name '*.md' | sort)
  echo "== $t: replaying ${#seedfiles[@]} seeds and ${#regfiles[@]} regressions"
  if [ ${#seedfiles[@]} -gt 0 ] &&
     ! "$bin" -timeout="$FUZZ_TIMEOUT" -artifact_prefix="$findings/" "${seedfiles[@]}" >>"$log" 2>&1; then
    ok=0
    echo "   a seed FAILED; from $log:"
    grep -aE "ERROR|FUZZ_CHECK|runtime error|Running:" "$log" | tail -6 | cut -c1-300 | sed 's/^/   /'
  fi
  for f in "${regfiles[@]}"; do
    if ! "$bin" -timeout="$FUZZ_TIMEOUT" -artifact_prefix="$findings/" "$f" >"$log.one" 2>&1; then
      ok=0
      echo "   regression still fails: $f"
      grep -aE "ERROR: |FUZZ_CHECK|runtime error" "$log.one" | head -2 | cut -c1-300 | sed 's/^/     /'
    fi
    cat "$log.one" >> "$log"
  done
  rm -f "$log.one"

  # 2. fuzz
  execs=0
  if [ "$ok" = 1 ] && [ "$FUZZ_SECONDS" -gt 0 ]; then
    echo "== $t: fuzzing for ${FUZZ_SECONDS}s"
    start=$(date +%s)
    "$bin" -max_total_time="$FUZZ_SECONDS" -timeout="$FUZZ_TIMEOUT" -print_final_stats=1 \
      -artifact_prefix="$findings/" "${dict[@]}" "$work" "$seeds" >>"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    execs=$(grep -aoE 'stat::number_of_executed_units: [0-9]+' "$log" | tail -1 | grep -aoE '[0-9]+$')
    cov=$(grep -aoE '#[0-9]+[[:space:]]+DONE[[:space:]]+cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 | sed -E 's/.*(cov: [0-9]+ ft: [0-9]+)/\1/')
    if [ $rc -ne 0 ]; then
      ok=0
      echo "   FINDING after ${secs}s (exit $rc); the end of $log:"
      grep -aE "ERROR|FUZZ_CHECK|runtime error|Test unit written|^    #[0-9]" "$log" | tail -30 | sed 's/^/   /'
    fi
    summary+=("$t: ${secs}s, ${execs:-0} execs, ${cov:-cov ?}, $( [ $ok = 1 ] && echo "no findings" || echo "FINDING in $findings" )")
  else
    summary+=("$t: replay $( [ $ok = 1 ] && echo ok || echo FAILED )")
  fi
  if [ "$ok" = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done

echo
printf '%s\n' "${summary[@]}"
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
