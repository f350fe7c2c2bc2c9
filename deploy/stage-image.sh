#!/usr/bin/env bash
# stage-image.sh: lays out what a Mantissa container image holds, in the
# build stage of deploy/Dockerfile (and in tests/deploy/check_configs.sh, on
# the host, to check it), under OUT:
#   OUT/opt/mantissa/bin/mantissa              the binary
#   OUT/opt/mantissa/lib/libmantissa_cuda.so   a CUDA build's backend module,
#                                              when it sits next to BIN (the
#                                              binary opens it from ../lib)
#   OUT/opt/mantissa/models/all-MiniLM-L6-v2/  the weights, when fetched (else
#                                              empty: mount them there)
#   OUT/etc/mantissa/mantissa.json             the default config (mount a
#                                              ConfigMap over /etc/mantissa)
#   OUT/opt/mantissa/runtime-packages.txt      the Debian/Ubuntu packages that
#                                              own the binary's direct shared
#                                              libraries (apt pulls in the rest)
# The runtime stage installs that package list, so it never drifts from what
# the binary links. Fails when a library belongs to no package, except the
# CUDA toolkit's (under /usr/local/cuda*), which the gpu target's runtime base
# image provides.
#
#   deploy/stage-image.sh BIN OUT
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?usage: stage-image.sh BIN OUT}
OUT=${2:?usage: stage-image.sh BIN OUT}
MODEL=models/all-MiniLM-L6-v2

# The package owning a library path; tries the path as ldd gives it, its
# real path, and each with and without the /usr prefix (merged /usr).
owner() {
  local p cand=() real
  real=$(readlink -f "$1")
  for p in "$1" "$real"; do
    cand+=("$p")
    case $p in
      /usr/*) cand+=("${p#/usr}") ;;
      *) cand+=("/usr$p") ;;
    esac
  done
  for p in "${cand[@]}"; do
    if out=$(dpkg-query -S "$p" 2>/dev/null); then
      printf '%s\n' "$out" | head -1 | cut -d: -f1
      return 0
    fi
  done
  return 1
}

mkdir -p "$OUT/opt/mantissa/bin" "$OUT/opt/mantissa/$MODEL" "$OUT/etc/mantissa"
install -m 0755 "$BIN" "$OUT/opt/mantissa/bin/mantissa"
MOD=$(dirname "$BIN")/libmantissa_cuda.so
objs=("$BIN")
if [ -f "$MOD" ]; then
  mkdir -p "$OUT/opt/mantissa/lib"
  install -m 0644 "$MOD" "$OUT/opt/mantissa/lib/libmantissa_cuda.so"
  objs+=("$MOD")
fi
install -m 0644 config/mantissa.json "$OUT/etc/mantissa/mantissa.json"
if [ -s "$MODEL/model.safetensors" ]; then
  cp -R "$MODEL/." "$OUT/opt/mantissa/$MODEL/"
  chmod -R a+rX "$OUT/opt/mantissa/models"
fi

pkgs=()
for obj in "${objs[@]}"; do
  for lib in $(objdump -p "$obj" | awk '$1 == "NEEDED" {print $2}'); do
    path=$(ldd "$obj" | awk -v l="$lib" '$1 == l && $3 ~ /^\// {print $3}')
    if [ -z "$path" ]; then
      echo "stage-image: $lib (needed by $obj) is not found by ldd" >&2
      exit 1
    fi
    case $(readlink -f "$path") in
      /usr/local/cuda*) # the CUDA runtime and cuBLAS(Lt): the gpu target's runtime base has them
        echo "stage-image: $lib comes with the CUDA runtime base image"
        continue ;;
    esac
    if ! pkg=$(owner "$path"); then
      echo "stage-image: $path ($lib) belongs to no installed package" >&2
      exit 1
    fi
    pkgs+=("$pkg")
  done
done
printf '%s\n' "${pkgs[@]}" | sort -u > "$OUT/opt/mantissa/runtime-packages.txt"
echo "stage-image: staged ${objs[*]} into $OUT; runtime packages: $(tr '\n' ' ' < "$OUT/opt/mantissa/runtime-packages.txt")"
