#!/usr/bin/env bash
# gpu.sh: everything the CUDA backend needs a GPU for, as one script.
#
#   bench/gpu.sh pack
#       On the development machine (no GPU needed): builds with CUDA=1 GRPC=0
#       for sm_90a alone into build/gpu90/, and writes build/gpu-carry/bundle.tar.xz (~55 MB): the
#       test and benchmark programs, the shared libraries they need that a
#       CUDA/PyTorch image lacks (oneDNN, cJSON, libgomp, OpenCL loader), the
#       model with its tensors in FP16 (the device tool carries 64 MiB), and
#       the CPU FP32 path's vectors of the reference sentences computed from
#       exactly those (widened) weights.
#
#   bench/gpu.sh run [PHASES]
#       On the GPU machine, from the repository root. PHASES (comma-separated,
#       run in the order given; default tests,gemm,e2e,serve,stsb,sanitize):
#         tests     every tests/gpu program, test_gpu_graphs and test_gpu_model
#                   on the shipped MiniLM, test_gpu_backend again under
#                   MANTISSA_CUDA_DEBUG_SYNC=1
#         gemm      bench/gpu/gemm_bench (every shape and m)
#         direct    gemm_bench on the LLM shapes at m = 1, 4, 16 and 1024 only
#                   (the direct W8A16 kernel against the staged one, the FP8
#                   row quantization, and at m = 1024 the best of cuBLASLt's
#                   first 8 algorithms for fp16 and w8a8; ~40 s), into
#                   gemm.json as gemm does
#         e2e       bench/gpu/e2e_bench beside the PyTorch FP16 peers (eager, and
#                   torch.compile at batches 256 and 32), same ids
#         serve     mantissa serve on device "cuda", a precision switch
#                   through every precision under load (serve_switch.py)
#         peers     mantissa serve on device "cuda" (fp16, int8) against
#                   sentence-transformers FP16 on the same GPU, one sentence
#                   per request, concurrency 1, 16, 64 and open loop
#                   (serve_peers.py; ~2.5 min)
#         sanitize  compute-sanitizer memcheck, racecheck, synccheck on the
#                   kernel tests' short list, memcheck on the smoothing tests'
#         asan      test_gpu_backend and test_gpu_graphs built with ASan+UBSan
#         profile   ncu kernel times of forwards at 256 x 128 tokens (PROFILE_E2E),
#                   ncu sections of the fused kernel, graphs on/off at batch 1
#         sweep     the fused kernel's split-K target (gemm_bench --target-blocks) on
#                   the LLM shapes and MiniLM's QKV and MLP down at m = 16..256
#         stsb      STS-B Spearman of each precision on the GPU and of FP32 on
#                   the CPU, same weights (`mantissa eval`)
#         mpnet     all-mpnet-base-v2's shapes with weights generated from a
#                   seed (the bundle carries its spec, not its 438 MB): GPU fp32
#                   and fp16 against the CPU FP32, then e2e at 32 and 256 x 128
#                   tokens beside PyTorch FP16 on the same weights (~2 min)
#       Uses the bundle when there is one, else builds in place (which needs
#       the CPU build's dependencies). Writes to $OUT (default
#       build/gpu-out): gpu-results.md (the page for
#       bench/results/gpu-<date>.md), tests.log, gemm.json, e2e.json,
#       peer.json, serve.json, logs.tar.gz (every log).
#
# From a session with the device tool (the GPU machine has no network):
#   bench/gpu.sh pack     # here, once per code change
#   device run: command "bench/gpu.sh run", carry ["build/gpu-carry"]
#   then copy $OUT/gpu-results.md to bench/results/gpu-$(date -u +%F).md
#
# The device tool allows 10 minutes per command: `run` keeps to RUN_BUDGET_S
# (default 560 s) by giving each step at most what is left, and says in the
# report which steps it had to skip. Split the phases over two calls if the
# budget runs out (e.g. "run tests,sanitize", then "run gemm,e2e"). The first
# full run on an H200 (2026-11-26) took 185 s for the default phases. With
# 15 minutes of device time in all (start-up included), pack with
# PACK_ASAN=0 (with the ASan build the bundle and the tracked files pass the
# 64 MiB the device tool carries; pack warns when they do) and ask for
# "RUN_BUDGET_S=570 run tests,e2e,mpnet,profile,peers,direct" in one call
# (417 s on an H100, 2026-11-28; a warm machine is given back after 30 s
# idle, so a second call usually starts a fresh one: ~40 s more). To check
# the 8-bit changes made after that run (kernels/cuda/NOTES.md, top) ask
# first for "RUN_BUDGET_S=570 run tests,e2e,profile,stsb,gemm" (estimated
# 350-450 s: mpnet, peers and direct were 200 s of the 417 and are not
# needed for them), then "run sanitize,mpnet,peers" if time is left.
#
# Environment: SECONDS_PER_POINT (e2e, default 1.5), RUN_BUDGET_S, JOBS, OUT,
# COMPILE_BATCHES (torch.compile peer, default 256,32), PROFILE_W8A16_MS (the
# m of the fused kernel's ncu sections in profile, default "1 64"; empty: none),
# PROFILE_E2E (profile: the forwards whose kernel times ncu takes, as
# precision:batch words, default "fp16:256 int8:256 fp8:256 int8:1"; only
# the timed forwards are profiled, not the load and its tuner),
# PEERS_PRECISIONS (peers: Mantissa's variants, default fp16,int8), PEERS_SECONDS
# (peers: seconds a point, default 4).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=build/gpu-carry
CFG=gpu

say() { printf '[gpu.sh %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# A hash of the C/CUDA sources the bundle is built from, so that `run` can
# tell a stale bundle (no git needed on the GPU machine).
src_hash() {
  find engine kernels models server cmd tests/gpu bench/gpu -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
    -not -path 'models/*/*' | LC_ALL=C sort | xargs cat Makefile | sha256sum | cut -c1-16
}

# ---------------------------------------------------------------------------
pack() {
  set -e
  local jobs=${JOBS:-$(nproc)} py=${PYTHON:-.venv/bin/python}
  [ -x "$py" ] || py=python3
  [ -f models/all-MiniLM-L6-v2/model.safetensors ] || make model
  # The lent GPUs are H100/H200 (sm_90a): the bundle carries that machine code
  # alone, since every binary holds the whole fatbin and the device tool
  # carries 64 MiB in all (CI and `make CUDA=1` still build every target).
  # GRPC=0: the GPU phases speak HTTP only, and libgrpc with its libraries
  # (~3 MB of the compressed bundle) would push it past the carry limit
  local CFG=gpu90 gencode=${PACK_GENCODE:--gencode arch=compute_90a,code=sm_90a}
  say "building with CUDA=1 GRPC=0 into build/$CFG for $gencode (make -j$jobs)"
  make --no-print-directory CFG=$CFG CUDA=1 GRPC=0 CUDA_GENCODE="$gencode" -j"$jobs" all
  local st=$CARRY/stage
  rm -rf "$st" && mkdir -p "$st/bin" "$st/lib"
  # every test program (tests/gpu/test_*.c) and every benchmark (bench/gpu/*.c)
  local progs=()
  for f in tests/gpu/test_*.c; do progs+=("build/$CFG/tests/gpu/$(basename "$f" .c)"); done
  for f in bench/gpu/*.c; do progs+=("build/$CFG/bench/gpu/$(basename "$f" .c)"); done
  progs+=("build/$CFG/mantissa" "build/$CFG/libmantissa_cuda.so") # the binary opens the module beside it
  make --no-print-directory CFG=$CFG CUDA=1 GRPC=0 CUDA_GENCODE="$gencode" "build/$CFG/bench/loadgen"
  progs+=("build/$CFG/bench/loadgen") # the peers phase's load generator
  cp "${progs[@]}" "$st/bin/"
  strip -g "$st"/bin/*   # host debug info only: the device code and its line info stay
  # the backend tests under ASan+UBSan too: host-side memory errors around
  # the CUDA calls (libasan and libubsan travel with the other libraries).
  # PACK_ASAN=0 leaves them out (~5 MB of the 64 MiB the device tool carries)
  if [ "${PACK_ASAN:-1}" = 1 ]; then
    say "ASan+UBSan build of the backend tests into build/asan90"
    make --no-print-directory CFG=asan90 CUDA=1 GRPC=0 SANITIZE=address,undefined CUDA_GENCODE="$gencode" \
      -j"$jobs" build/asan90/tests/gpu/test_gpu_backend build/asan90/tests/gpu/test_gpu_graphs
    mkdir -p "$st/bin-asan"
    cp build/asan90/tests/gpu/test_gpu_backend build/asan90/tests/gpu/test_gpu_graphs "$st/bin-asan/"
    strip -g "$st"/bin-asan/*
  fi
  # libraries the binaries need beyond glibc, libstdc++ and the CUDA toolkit's own
  for b in "$st"/bin/* $(ls -d "$st"/bin-asan/* 2>/dev/null); do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
    while read -r lib; do
      case $(basename "$lib") in
        libc.so*|libm.so*|libmvec.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|\
        libgcc_s.so*|libstdc++.so*|libcudart.so*|libcublas*.so*|libcuda.so*) ;;
        *) cp -L "$lib" "$st/lib/" ;;
      esac
    done
  say "libraries carried: $(ls "$st/lib" | tr '\n' ' ')"
  "$py" bench/gpu/pack_model.py to16 models/all-MiniLM-L6-v2 "$st/minilm16"
  # MPNet's spec only (438 MB of weights do not travel): the mpnet phase
  # generates weights of its shapes from a seed on the GPU machine
  if [ -f models/all-mpnet-base-v2/model.safetensors ]; then
    "$py" bench/gpu/pack_model.py spec models/all-mpnet-base-v2 "$st/mpnet-spec"
  else
    say "no models/all-mpnet-base-v2 (make model-all): the mpnet phase will skip"
  fi
  python3 bench/gpu/pack_model.py to32 "$st/minilm16" build/$CFG/minilm32
  say "CPU FP32 reference vectors of the FP16-rounded weights"
  build/$CFG/tests/gpu/test_gpu_model --make-ref "$st/ref_cpu_fp32.f32" --model build/$CFG/minilm32
  # the STS-B test split, for the drift of each precision on the GPU (stsb)
  local sts=${STSB:-../shared/data/stsb/sts-test.csv}
  [ -f "$sts" ] && cp "$sts" "$st/sts-test.csv" || say "no $sts: the stsb phase will skip"
  git rev-parse HEAD > "$st/commit" 2>/dev/null || echo unknown > "$st/commit"
  git status --porcelain | grep -q . && echo "+ uncommitted changes" >> "$st/commit" || true
  echo "sources $(src_hash)" >> "$st/commit"
  say "compressing"
  tar -C "$st" -cf - . | xz -T"$jobs" ${PACK_XZ:--9e} > "$CARRY/bundle.tar.xz"
  rm -rf "$st"
  say "wrote $CARRY/bundle.tar.xz ($(du -h "$CARRY/bundle.tar.xz" | cut -f1)); carry it as $CARRY"
  local total=$(( $(stat -c %s "$CARRY/bundle.tar.xz") + $(git ls-files -z | xargs -0 stat -c %s | paste -sd+ | bc) ))
  [ "$total" -le $((64 << 20)) ] ||
    say "WARNING: bundle + tracked files = $((total >> 20)) MiB, over the 64 MiB the device tool carries (try PACK_ASAN=0)"
}

# ---------------------------------------------------------------------------
run() {
  local phases=${1:-all} t_start=$SECONDS
  OUT=${OUT:-$ROOT/build/gpu-out}
  mkdir -p "$OUT"
  local W=/tmp/mantissa-gpu LOG=/tmp/mantissa-gpu/logs
  rm -rf "$W" && mkdir -p "$LOG"
  local budget=${RUN_BUDGET_S:-560}
  # seconds a step may take: its own cap, or what is left of the budget
  cap() { local left=$((budget - (SECONDS - t_start) - 15)); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
  # a step needs at least $1 seconds of budget, else it is skipped (and noted)
  room() {
    if [ "$(cap 100000)" -lt "$1" ]; then
      echo "skipped $2: out of the ${budget}s budget" | tee -a "$LOG/skipped.txt" >&2
      return 1
    fi
  }

  { date -u; uname -a; nvidia-smi 2>&1 || true; nvcc --version 2>&1 || true; } > "$LOG/machine.txt"
  say "$(nvidia-smi -L 2>/dev/null | head -1)"

  local nvcc_dir cuda_lib=""
  nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
  for d in "$nvcc_dir/../lib64" "$nvcc_dir/../lib" /usr/local/cuda/lib64; do
    [ -e "$d/libcublasLt.so" ] || ls "$d"/libcublasLt.so.* >/dev/null 2>&1 && { cuda_lib=$(cd "$d" && pwd); break; }
  done
  local BIN LIBS=""
  if [ -f "$CARRY/bundle.tar.xz" ]; then
    say "unpacking $CARRY/bundle.tar.xz"
    if command -v xz > /dev/null; then
      xz -dc "$CARRY/bundle.tar.xz" | tar -C "$W" -xf -
    else
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$CARRY/bundle.tar.xz" "$W"
    fi
    BIN=$W/bin LIBS=$W/lib
    if ! grep -q "sources $(src_hash)" "$W/commit"; then
      echo "STALE BUNDLE: built from other sources than this tree; run bench/gpu.sh pack again" |
        tee "$LOG/stale.txt" >&2
    fi
    python3 bench/gpu/pack_model.py to32 "$W/minilm16" "$W/minilm" >> "$LOG/setup.log" 2>&1
  else
    say "no bundle: building in place (needs the CPU build's dependencies)"
    make --no-print-directory CFG=$CFG CUDA=1 -j"${JOBS:-$(nproc)}" all "build/$CFG/bench/loadgen" > "$LOG/build.log" 2>&1 ||
      { say "build failed; see build.log"; tail -30 "$LOG/build.log"; }
    BIN=$W/bin && mkdir -p "$BIN"
    cp build/$CFG/tests/gpu/test_gpu_* build/$CFG/bench/gpu/*_bench build/$CFG/mantissa \
      build/$CFG/libmantissa_cuda.so build/$CFG/bench/loadgen "$BIN/" 2>/dev/null
    [ -f ../shared/data/stsb/sts-test.csv ] && cp ../shared/data/stsb/sts-test.csv "$W/"
    rm -f "$BIN"/*.o "$BIN"/*.d
    ln -s "$ROOT/models/all-MiniLM-L6-v2" "$W/minilm"
  fi
  runb() { LD_LIBRARY_PATH="${LIBS:+$LIBS:}${cuda_lib:+$cuda_lib:}${LD_LIBRARY_PATH:-}" "$@"; }
  local ref_args=(--model "$W/minilm")
  [ -f "$W/ref_cpu_fp32.f32" ] && ref_args+=(--ref "$W/ref_cpu_fp32.f32")

  phase_tests() {
    say "tests/gpu"
    : > "$LOG/tests.log"
    for t in "$BIN"/test_gpu_*; do
      t=$(basename "$t")
      case "$t" in test_gpu_model|test_gpu_graphs) continue ;; esac
      room 30 "$t" || continue
      runb timeout "$(cap 120)" "$BIN/$t" 2>&1 | tee -a "$LOG/tests.log" | grep -E 'FAIL|passed|SKIP' || true
    done
    # the model forward as CUDA graphs (bitwise vs the padded eager forward,
    # launch counts of a batch-1 forward with and without graphs)
    room 30 test_gpu_graphs &&
      { runb timeout "$(cap 150)" "$BIN/test_gpu_graphs" --model "$W/minilm" 2>&1 |
          tee -a "$LOG/tests.log" | grep -E 'FAIL|passed|SKIP|gpu graphs: .*(op calls|max \|diff)' || true; }
    # the debug switch: every op synchronised and checked, no graphs recorded
    room 30 "debug-sync pass" &&
      { echo "== MANTISSA_CUDA_DEBUG_SYNC=1 test_gpu_backend --quick" >> "$LOG/tests.log"
        MANTISSA_CUDA_DEBUG_SYNC=1 runb timeout "$(cap 120)" "$BIN/test_gpu_backend" --quick 2>&1 |
          sed 's/^gpu backend:/gpu backend (debug sync):/' | tee -a "$LOG/tests.log" |
          grep -E 'FAIL|passed|SKIP' || true; }
    room 30 test_gpu_model &&
      { runb timeout "$(cap 150)" "$BIN/test_gpu_model" "${ref_args[@]}" 2>&1 | tee -a "$LOG/tests.log" |
        grep -E 'FAIL|passed|SKIP|gpu model: [a-z0-9/]+ +mean' || true; }
    # BERT's own GELU (erf, a pass) instead of the default epilogue's tanh form
    room 30 "test_gpu_model, MANTISSA_CUDA_GELU=erf" &&
      { echo "== MANTISSA_CUDA_GELU=erf test_gpu_model" >> "$LOG/tests.log"
        MANTISSA_CUDA_GELU=erf runb timeout "$(cap 150)" "$BIN/test_gpu_model" "${ref_args[@]}" 2>&1 |
          sed 's/^gpu model:/gpu model (gelu erf):/' | tee -a "$LOG/tests.log" |
          grep -E 'FAIL|passed|SKIP|gpu model \(gelu erf\): [a-z0-9/]+ +mean' || true; }
  }
  phase_sanitize() {
    local cs
    cs=$(command -v compute-sanitizer || ls "$nvcc_dir"/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
         /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
    : > "$LOG/sanitizer.log"
    if [ -z "$cs" ]; then
      echo "sanitizer: compute-sanitizer not found" | tee -a "$LOG/sanitizer.log"
    else
      for tool in memcheck racecheck synccheck; do
        room 40 "compute-sanitizer $tool" || continue
        say "compute-sanitizer --tool $tool (kernel tests, --quick)"
        runb timeout "$(cap 150)" "$cs" --tool "$tool" --error-exitcode 97 "$BIN/test_gpu_kernels" --quick \
          >> "$LOG/sanitizer.log" 2>&1
        echo "sanitizer $tool: exit $? (97: errors found, 124: timed out)" | tee -a "$LOG/sanitizer.log"
      done
      if room 40 "compute-sanitizer memcheck (smoothing)"; then
        say "compute-sanitizer --tool memcheck (smoothing tests, --quick)"
        runb timeout "$(cap 150)" "$cs" --tool memcheck --error-exitcode 97 "$BIN/test_gpu_smooth" --quick \
          >> "$LOG/sanitizer.log" 2>&1
        echo "sanitizer memcheck smooth: exit $? (97: errors found, 124: timed out)" | tee -a "$LOG/sanitizer.log"
      fi
    fi
  }
  phase_gemm() {
    room 60 "GEMM microbenchmark" || return 0
    say "GEMM microbenchmark"
    runb timeout "$(cap 150)" "$BIN/gemm_bench" --json "$W/gemm.json" > "$W/gemm.md" 2> "$LOG/gemm.err"
    tail -3 "$W/gemm.md"
  }
  phase_direct() {
    room 40 "GEMM points of the direct kernel" || return 0
    say "GEMM microbenchmark, LLM shapes at m = 1, 4, 16, 1024"
    runb timeout "$(cap 90)" "$BIN/gemm_bench" --shapes llm --ms 1,4,16,1024 --algos --json "$W/gemm.json" \
      > "$W/gemm.md" 2> "$LOG/gemm.err"
    tail -3 "$W/gemm.md"
  }
  phase_e2e() {
    room 90 "end to end" || return 0
    local secs=${SECONDS_PER_POINT:-1.5}
    say "end to end: ids, PyTorch FP16 peer, Mantissa (${secs}s per point)"
    runb "$BIN/e2e_bench" --write-ids "$W/ids.json" --rows 256 --len 128
    PYTHONUNBUFFERED=1 timeout "$(cap 90)" python3 bench/gpu/peer_torch.py --model "$W/minilm" \
      --ids "$W/ids.json" --seconds "$secs" > "$W/peer.json" 2> "$LOG/peer.err" ||
      say "peer failed: $(tail -3 "$LOG/peer.err")"
    runb timeout "$(cap 150)" "$BIN/e2e_bench" --model "$W/minilm" --ids "$W/ids.json" --seconds "$secs" \
      --json "$W/e2e.json" 2> "$LOG/e2e.err" || say "e2e failed: $(tail -3 "$LOG/e2e.err")"
    # the same model under torch.compile (inductor, FP16), batches 256 and 32:
    # one compilation per batch size (tens of seconds), so only where there is room
    room 100 "torch.compile peer" &&
      { PYTHONUNBUFFERED=1 timeout "$(cap 150)" python3 bench/gpu/peer_torch.py --compile --model "$W/minilm" \
          --ids "$W/ids.json" --seconds "$secs" --batch "${COMPILE_BATCHES:-256,32}" > "$W/peer-compile.json" \
          2> "$LOG/peer-compile.err" || say "compile peer failed: $(tail -3 "$LOG/peer-compile.err")"; }
    # fp16/bf16 and int8/fp8 on FP32 activations between ops
    # (MANTISSA_CUDA_ACT16=0): the forward before 16-bit activations, same run
    room 30 "end to end, MANTISSA_CUDA_ACT16=0" &&
      { MANTISSA_CUDA_ACT16=0 runb timeout "$(cap 80)" "$BIN/e2e_bench" --model "$W/minilm" --ids "$W/ids.json" \
          --seconds "$secs" --precisions fp16,bf16,int8,fp8 --json "$W/e2e-act32.json" 2>> "$LOG/e2e.err" ||
          say "e2e (act32) failed: $(tail -3 "$LOG/e2e.err")"; }
    # fp8 with its GEMMs quantizing their own rows (MANTISSA_CUDA_LN_QUANT=0):
    # what the LayerNorm's quantization buys, same run
    room 25 "end to end, MANTISSA_CUDA_LN_QUANT=0" &&
      { MANTISSA_CUDA_LN_QUANT=0 runb timeout "$(cap 40)" "$BIN/e2e_bench" --model "$W/minilm" --ids "$W/ids.json" \
          --seconds "$secs" --precisions fp8 --json "$W/e2e-lnq0.json" 2>> "$LOG/e2e.err" ||
          say "e2e (ln_quant 0) failed: $(tail -3 "$LOG/e2e.err")"; }
    # int8 with INT8 W8A8 on 8-bit tensor cores allowed (MANTISSA_CUDA_INT8_W8A8=1,
    # not yet the default): the tuner's choice and its speed against int8's default
    room 25 "end to end, MANTISSA_CUDA_INT8_W8A8=1" &&
      { MANTISSA_CUDA_INT8_W8A8=1 runb timeout "$(cap 40)" "$BIN/e2e_bench" --model "$W/minilm" --ids "$W/ids.json" \
          --seconds "$secs" --precisions int8 --json "$W/e2e-i8w8a8.json" 2>> "$LOG/e2e.err" ||
          say "e2e (int8 w8a8) failed: $(tail -3 "$LOG/e2e.err")"; }
  }
  # the server on the GPU: mantissa serve, device "cuda", a precision switch
  # through every precision under 16 client threads; zero failed requests
  phase_serve() {
    room 45 "serve under a precision switch" || return 0
    say "mantissa serve on the GPU, switching precision under load"
    runb timeout "$(cap 100)" python3 bench/gpu/serve_switch.py --bin "$BIN/mantissa" --model "$W/minilm" \
      --json "$W/serve.json" > "$LOG/serve.log" 2>&1
    echo "serve_switch: exit $?" | tee -a "$LOG/serve.log"
    grep -E '"(failures|ok|answered)"' "$LOG/serve.log" || tail -5 "$LOG/serve.log"
  }
  # the backend tests again, built with ASan+UBSan (host memory errors)
  phase_asan() {
    [ -d "$W/bin-asan" ] || { say "no ASan build in the bundle"; return 0; }
    : > "$LOG/asan.log"
    local t
    for t in test_gpu_backend test_gpu_graphs; do
      room 40 "ASan $t" || continue
      say "ASan+UBSan $t --quick"
      ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:replace_intrin=0 UBSAN_OPTIONS=print_stacktrace=1 \
        runb timeout "$(cap 150)" "$W/bin-asan/$t" --quick --model "$W/minilm" >> "$LOG/asan.log" 2>&1
      echo "asan $t: exit $?" | tee -a "$LOG/asan.log"
    done
  }
  # where the time goes: Nsight Compute kernel times of a batch-256 FP16
  # forward, the fused kernel's own sections at LLM m = 1 and 64, and the
  # batch-1 forward with and without CUDA graphs
  phase_profile() {
    room 60 "profile" || return 0
    local P=$LOG/profile.md ncu
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -f "$W/ids.json" ] || runb "$BIN/e2e_bench" --write-ids "$W/ids.json" --rows 256 --len 128
    : > "$P"
    say "batch-1 forward with and without CUDA graphs"
    { echo "### batch 1, 128 tokens: CUDA graphs on (default) and off"; echo '```'
      for g in 1 0; do
        MANTISSA_CUDA_GRAPHS=$g runb timeout "$(cap 60)" "$BIN/e2e_bench" --model "$W/minilm" --ids "$W/ids.json" \
          --precisions fp16,int8 --batch 1 --seconds 1 2>&1 | sed "s/^/graphs=$g /" | grep -F 'sentences/s'
      done; echo '```'; } >> "$P" 2>&1
    if [ -z "$ncu" ]; then echo "ncu not found" >> "$P"; return 0; fi
    local pb pr b
    for pb in ${PROFILE_E2E:-fp16:256 int8:256 fp8:256 int8:1}; do
      pr=${pb%%:*} b=${pb##*:}
      room 30 "ncu e2e $pb" || continue
      say "ncu: kernel times of the $pr forward at $b x 128 tokens"
      runb timeout "$(cap 120)" "$ncu" --clock-control none --profile-from-start off --csv \
        --metrics gpu__time_duration.sum "$BIN/e2e_bench" --model "$W/minilm" --ids "$W/ids.json" \
        --precisions "$pr" --batch "$b" --seconds 0 \
        > "$LOG/ncu_e2e_${pr}_$b.csv" 2> "$LOG/ncu_e2e_${pr}_$b.err"
      { echo; echo "### $pr forward, $b x 128 tokens: kernel time by kernel (ncu)"; echo
        python3 bench/gpu/ncu_sum.py "$LOG/ncu_e2e_${pr}_$b.csv" --per mean_pool; } >> "$P" 2>&1
    done
    local m
    for m in ${PROFILE_W8A16_MS-1 64}; do
      room 40 "ncu w8a16 m=$m" || continue
      say "ncu: the fused kernel at 11008x4096, m = $m"
      { echo; echo "### fused W8A16 kernel, 11008x4096 int8, m = $m (ncu sections)"; echo '```'
        runb timeout "$(cap 90)" "$ncu" --clock-control none -k regex:w8a16 --launch-skip 2 --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
          --section SchedulerStats --section WarpStateStats \
          "$BIN/gemm_bench" --shapes 11008x4096 --ms "$m" 2>&1 | grep -v '^|' | grep -v '^==PROF==' | tail -120
        echo '```'; } >> "$P"
    done
  }
  # the fused kernel's split-K target (blocks per launch) against its time
  phase_sweep() {
    local tb sms
    sms=${SMS:-132}  # H100 SXM and H200 alike
    : > "$LOG/sweep.md"
    for tb in $((sms)) $((2 * sms)) $((4 * sms)) $((8 * sms)); do
      room 30 "sweep $tb" || continue
      say "gemm_bench 11008x4096, 4096x11008 and MiniLM's QKV and MLP down, --target-blocks $tb"
      for sh in 11008x4096:1,4,16,64 4096x11008:1,4,16,64 1152x384:16,64,128,256 384x1536:16,64,128,256; do
        { echo "### ${sh%%:*}, --target-blocks $tb"
          runb timeout "$(cap 60)" "$BIN/gemm_bench" --shapes "${sh%%:*}" --ms "${sh##*:}" \
            --target-blocks "$tb" 2>&1 | grep -E '^\| (m|[0-9])'; echo; } >> "$LOG/sweep.md"
      done
    done
  }
  # STS-B Spearman of every precision on the GPU beside the CPU's FP32, on
  # the same (FP16-rounded) weights: `mantissa eval`, one variant per config
  phase_stsb() {
    [ -f "$W/sts-test.csv" ] || { say "no STS-B file in the bundle"; return 0; }
    local dv d p r
    : > "$LOG/stsb.md"
    for dv in cpu:fp32 cuda:fp32 cuda:tf32 cuda:fp16 cuda:bf16 cuda:int8 cuda:fp8 cuda:int8+w8a8; do
      room 20 "STS-B $dv" || continue
      d=${dv%%:*} p=${dv#*:}
      # int8+w8a8: int8 with INT8 W8A8 allowed (MANTISSA_CUDA_INT8_W8A8=1, not yet the default)
      local i8=0
      [ "$p" = int8+w8a8 ] && { i8=1; p=int8; }
      printf '{"models": [{"name": "minilm", "path": "%s", "device": "%s", "variants": [{"name": "v", "precision": "%s", "traffic": 100}]}]}\n' \
        "$W/minilm" "$d" "$p" > "$W/stsb.json"
      say "STS-B: $p on $d"
      r=$(MANTISSA_CUDA_INT8_W8A8=$i8 runb timeout "$(cap 90)" "$BIN/mantissa" eval --config "$W/stsb.json" \
          --stsb "$W/sts-test.csv" --model minilm@v 2>> "$LOG/stsb.log" | grep -o 'Spearman x100: [0-9.]*')
      echo "| $d | ${dv#*:} | ${r#Spearman x100: } |" >> "$LOG/stsb.md"
    done
    cat "$LOG/stsb.md"
  }
  # MPNet on the GPU (issue 24, item 6): weights with all-mpnet-base-v2's
  # names and shapes generated from a seed here (pack_model.py gen); the
  # GPU's fp32 and fp16 against the CPU FP32 of the same weights (the 8-bit
  # bounds of test_gpu_model are a trained model's drift, not random
  # weights'), then the encoder at 32 and 256 x 128 tokens beside PyTorch
  # FP16 on the same weights
  phase_mpnet() {
    [ -f "$W/mpnet-spec/weights-spec.json" ] || { say "no MPNet spec in the bundle"; return 0; }
    room 120 "MPNet (generated weights)" || return 0
    say "MPNet: generating weights, GPU against CPU, end to end"
    python3 bench/gpu/pack_model.py gen "$W/mpnet-spec" "$W/mpnet" --seed 20261127 >> "$LOG/setup.log" 2>&1 ||
      { say "generating MPNet's weights failed: $(tail -2 "$LOG/setup.log")"; return 0; }
    echo "== test_gpu_model --model mpnet (generated weights) --only fp32,fp16,fp16/act32" >> "$LOG/tests.log"
    runb timeout "$(cap 150)" "$BIN/test_gpu_model" --model "$W/mpnet" --only fp32,fp16,fp16/act32 2>&1 |
      sed 's/^gpu model:/gpu model (mpnet, generated):/' | tee -a "$LOG/tests.log" |
      grep -E 'FAIL|passed|SKIP|gpu model \(mpnet, generated\): [a-z0-9/]+ +mean' || true
    [ -f "$W/ids.json" ] || runb "$BIN/e2e_bench" --write-ids "$W/ids.json" --rows 256 --len 128
    room 60 "MPNet end to end" || return 0
    PYTHONUNBUFFERED=1 timeout "$(cap 90)" python3 bench/gpu/peer_torch.py --model "$W/mpnet" \
      --ids "$W/ids.json" --batch 32,256 --seconds "${SECONDS_PER_POINT:-1.5}" > "$W/peer-mpnet.json" \
      2> "$LOG/peer-mpnet.err" || say "MPNet peer failed: $(tail -3 "$LOG/peer-mpnet.err")"
    runb timeout "$(cap 120)" "$BIN/e2e_bench" --model "$W/mpnet" --ids "$W/ids.json" --batch 32,256 \
      --precisions fp32,fp16,bf16,int8,fp8 --seconds "${SECONDS_PER_POINT:-1.5}" \
      --json "$W/e2e-mpnet.json" 2>> "$LOG/e2e.err" || say "MPNet e2e failed: $(tail -3 "$LOG/e2e.err")"
  }
  # the server on the GPU against sentence-transformers FP16 on the same GPU
  # (bench/gpu/serve_peers.py: peer_st_server.py, bench/loadgen.c), one
  # STS-B sentence per request, closed loop at concurrency 1, 16, 64 and
  # open loop at 50% and 90% of each server's capacity (~2.5 minutes)
  phase_peers() {
    [ -f "$W/sts-test.csv" ] || { say "no STS-B file in the bundle"; return 0; }
    [ -x "$BIN/loadgen" ] || { say "no loadgen in the bundle"; return 0; }
    room 150 "server against sentence-transformers" || return 0
    say "mantissa serve (cuda) against sentence-transformers FP16: c = 1, 16, 64"
    # python3 and torch keep their own libraries: only Mantissa's processes get the bundle's
    timeout "$(cap 260)" python3 bench/gpu/serve_peers.py --bin "$BIN/mantissa" --loadgen "$BIN/loadgen" \
      --lib-path "${LIBS:+$LIBS:}${cuda_lib:+$cuda_lib}" --model "$W/minilm" --stsb "$W/sts-test.csv" \
      --precisions "${PEERS_PRECISIONS:-fp16,int8}" --seconds "${PEERS_SECONDS:-4}" --json "$W/serve-peers.json" --md "$W/serve-peers.md" \
      > "$LOG/serve-peers.log" 2>&1
    echo "serve_peers: exit $?" | tee -a "$LOG/serve-peers.log"
    grep -E '^serve_peers: .*req/s' "$LOG/serve-peers.log" || tail -5 "$LOG/serve-peers.log"
  }
  # phases run in the order asked for: put the ones that matter most first
  local ph
  [ "$phases" = all ] && phases=tests,gemm,e2e,serve,stsb,sanitize
  for ph in ${phases//,/ }; do
    case $ph in
      tests|sanitize|gemm|direct|e2e|serve|peers|asan|profile|sweep|stsb|mpnet) "phase_$ph" ;;
      *) say "unknown phase $ph (tests, sanitize, gemm, direct, e2e, serve, peers, asan, profile, sweep, stsb, mpnet)" ;;
    esac
  done

  python3 bench/gpu/report.py --work "$W" --phases "$phases" > "$OUT/gpu-results.md" ||
    say "report failed"
  for f in tests.log; do [ -f "$LOG/$f" ] && cp "$LOG/$f" "$OUT/"; done
  for f in gemm.json e2e.json e2e-act32.json e2e-lnq0.json e2e-i8w8a8.json peer.json peer-compile.json serve.json e2e-mpnet.json peer-mpnet.json serve-peers.json; do [ -f "$W/$f" ] && cp "$W/$f" "$OUT/"; done
  tar -C "$W" -czf "$OUT/logs.tar.gz" logs $(cd "$W" && ls gemm.md 2>/dev/null) || true
  say "done in $((SECONDS - t_start)) s; $OUT/gpu-results.md"
  tail -n 60 "$OUT/gpu-results.md"
}

case "${1:-}" in
  pack) pack ;;
  run) shift; run "${1:-all}" ;;
  *) sed -n '2,32p' "$0"; exit 2 ;;
esac
