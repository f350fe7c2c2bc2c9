#!/usr/bin/env bash
# bench/peers/setup.sh: installs the peers `make bench-peers` compares, once
# (a second run finds them and does nothing):
#   - .venv-peers: infinity-emb 0.0.78 with its torch and optimum extras and
#     everything else pinned in bench/peers/requirements.txt (~6 GB);
#   - build/peers/llama-build/bin/llama-server (build/peers/llama-build-avx2
#     with PEERS_ISA=avx2): llama.cpp as vendored in the
#     PyPI sdist of llama-cpp-python 0.3.36 (sha256-pinned), built with cmake
#     (Release, no web UI download, no curl/openssl), ~6 minutes on 2 cores;
#   - build/peers/minilm-{f32,q8_0}.gguf: our safetensors converted by its own
#     convert_hf_to_gguf.py.
# cmake and g++ come from Debian.
set -euo pipefail
cd "$(dirname "$0")/../.."
SDIST_VER=0.3.36
SDIST_SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
P=build/peers
L=$P/llama_cpp_python-$SDIST_VER/vendor/llama.cpp

for pkg in cmake g++; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || {
    echo "peers: installing $pkg"; apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg"; }
done

if [ ! -x .venv-peers/bin/infinity_emb ] || ! .venv-peers/bin/python -c "import sentencepiece" 2>/dev/null; then
  echo "peers: .venv-peers (infinity-emb, torch: several GB)"
  [ -x .venv-peers/bin/python ] || python3 -m venv .venv-peers
  .venv-peers/bin/pip install -q --disable-pip-version-check -r bench/peers/requirements.txt
fi

# PEERS_ISA=avx2: a second llama-server built for AVX2 alone (no AVX-512,
# no VNNI), as on a Zen 3 or a pre-Alder-Lake Intel CPU, into
# build/peers/llama-build-avx2 (peers_bench.py --isa avx2 runs it).
BDIR=$P/llama-build
[ -n "${PEERS_ISA:-}" ] && BDIR=$P/llama-build-$PEERS_ISA

if [ ! -x $BDIR/bin/llama-server ]; then
  mkdir -p $P/sdist
  if [ ! -f $P/sdist/llama_cpp_python-$SDIST_VER.tar.gz ]; then
    echo "peers: downloading the llama-cpp-python $SDIST_VER sdist"
    .venv/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      "llama-cpp-python==$SDIST_VER" -d $P/sdist
  fi
  echo "$SDIST_SHA  $P/sdist/llama_cpp_python-$SDIST_VER.tar.gz" | sha256sum -c --quiet || {
    echo "peers: llama-cpp-python sdist sha256 mismatch: refusing it" >&2; exit 1; }
  tar -C $P -xzf $P/sdist/llama_cpp_python-$SDIST_VER.tar.gz
  echo "peers: building llama-server (about 6 minutes on 2 cores)"
  # GGML_NATIVE=OFF with this CPU's features named but AMX left out: with
  # -march=native on a CPU with AMX, ggml's Q8_0 path died at start (SIGSEGV
  # or SIGILL) in our VMs; AVX-512 VNNI is what its int8 dot products use
  # otherwise.
  ISA=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  if [ "${PEERS_ISA:-}" != avx2 ]; then
    grep -qw avx512bw /proc/cpuinfo && ISA+=(-DGGML_AVX512=ON)
    grep -qw avx512_vnni /proc/cpuinfo && ISA+=(-DGGML_AVX512_VNNI=ON)
    grep -qw avx512_bf16 /proc/cpuinfo && ISA+=(-DGGML_AVX512_BF16=ON)
    grep -qw avx_vnni /proc/cpuinfo && ISA+=(-DGGML_AVX_VNNI=ON)
  fi
  cmake -S $L -B $BDIR -DCMAKE_BUILD_TYPE=Release -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    "${ISA[@]}" >$BDIR.cmake.log
  cmake --build $BDIR --target llama-server -j"$(nproc)" >$BDIR.build.log
fi

for t in f32 q8_0; do
  if [ ! -f $P/minilm-$t.gguf ]; then
    echo "peers: converting the model to GGUF $t"
    PYTHONPATH=$L/gguf-py .venv-peers/bin/python $L/convert_hf_to_gguf.py \
      models/all-MiniLM-L6-v2 --outtype $t --outfile $P/minilm-$t.gguf >$P/convert-$t.log 2>&1
  fi
done
echo "peers: ready"
