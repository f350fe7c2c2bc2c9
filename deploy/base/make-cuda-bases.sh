#!/usr/bin/env bash
# make-cuda-bases.sh: local stand-ins for NVIDIA's CUDA base images, which no
# registry reachable from our machines serves, made from this machine's CUDA
# toolkit copied into a debootstrapped Debian 12 root (ROOTFS):
#   nvidia/cuda:<ver>-devel-debian12    nvcc (bin, nvvm), headers, the CUDA
#                                       runtime and cuBLAS/cuBLASLt libraries
#   nvidia/cuda:<ver>-runtime-debian12  libcudart, libcublas, libcublasLt only
# at /usr/local/cuda as in NVIDIA's images, so deploy/Dockerfile's gpu target
# builds on them with --build-arg CUDA_VERSION=<ver> CUDA_OS=debian12.
#
#   deploy/base/make-cuda-bases.sh ROOTFS WORKDIR   (prints <ver>)
set -euo pipefail
ROOTFS=${1:?usage: make-cuda-bases.sh ROOTFS WORKDIR}
WORK=${2:?usage: make-cuda-bases.sh ROOTFS WORKDIR}
DOCKER=${DOCKER:-/usr/bin/docker}
NVCC=$(command -v nvcc) || { echo "make-cuda-bases: no nvcc on the PATH" >&2; exit 1; }
CUDA=$(readlink -f "$(dirname "$NVCC")/..")
VER=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
LIB=$CUDA/lib64
[ -e "$LIB/libcudart.so" ] || LIB=$CUDA/lib

copy_libs() { # dest, then library name patterns
  local dst=$1; shift
  mkdir -p "$dst"
  for pat in "$@"; do cp -a "$LIB"/$pat "$dst"/; done
}

make_image() { # kind, then the folders of the toolkit it gets
  local kind=$1 root=$WORK/cuda-$1
  rm -rf "$root"
  cp -a "$ROOTFS" "$root"
  mkdir -p "$root/usr/local/cuda"
  case $kind in
    devel)
      cp -a "$CUDA/bin" "$CUDA/nvvm" "$CUDA/include" "$root/usr/local/cuda/"
      [ -d "$CUDA/targets" ] && cp -a "$CUDA/targets" "$root/usr/local/cuda/"
      copy_libs "$root/usr/local/cuda/lib64" 'libcudart*' 'libcudadevrt.a' 'libculibos.a' \
        'libcublas.so*' 'libcublasLt.so*'
      ;;
    runtime)
      copy_libs "$root/usr/local/cuda/lib64" 'libcudart.so*' 'libcublas.so*' 'libcublasLt.so*'
      ;;
  esac
  echo /usr/local/cuda/lib64 > "$root/etc/ld.so.conf.d/cuda.conf"
  chroot "$root" /sbin/ldconfig
  tar -C "$root" -c . | $DOCKER import \
    --change 'ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "nvidia/cuda:$VER-$kind-debian12" >/dev/null
  rm -rf "$root"
}

make_image devel
make_image runtime
echo "$VER"
