#!/usr/bin/env bash
# image_test.sh: make test-image: builds the container image for real and
# runs the deployment scenario (tests/deploy/multi_replica.py) on three
# containers of it behind the host's nginx.
#
#   1. Debian's Docker engine and debootstrap (tools/install-deps.sh --image-tools);
#   2. dockerd started if none answers (overlay2 storage, else vfs), and
#      stopped at the end if we started it (KEEP_DOCKERD=1 keeps it);
#   3. the base image debian:12-slim made from a debootstrap of Debian 12
#      (minbase; no image registry is reachable from our machines), the
#      root filesystem cached in build/image-base/;
#   4. deploy/Dockerfile's cpu target built with BuildKit (Debian's 20.10
#      client: /usr/bin/docker; --network host for apt inside the build;
#      BAKE_MODEL=0: the weights are mounted read-only at run time);
#   5. multi_replica.py nginx --image: rolling SIGTERM with a request in
#      flight and a restart of each container, two precision switches by
#      ConfigMap-style swaps of the mounted config folder, zero failed
#      requests, HEALTHCHECK healthy, uid 10001, read-only root.
#
# The gpu target (make test-image-gpu) builds on local stand-ins for
# NVIDIA's CUDA images (deploy/base/make-cuda-bases.sh: this machine's CUDA
# toolkit in the debootstrapped root), checks that the binary finds
# libcudart and libcublasLt inside the image, and runs the same scenario
# (on the CPU where there is no GPU, as device "auto" does).
#
# Where no container engine can run it prints one SKIP line naming why and
# exits 0. Each step prints its time. Usage: tests/deploy/image_test.sh [cpu|gpu]
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=${1:-cpu}
case $TARGET in cpu|gpu) ;; *) echo "usage: image_test.sh [cpu|gpu]" >&2; exit 2 ;; esac
DOCKER=/usr/bin/docker
export DOCKER DOCKER_BUILDKIT=1
IMAGE=mantissa:test-$TARGET
BASE=build/image-base
T0=$(date +%s)
step() { echo "image_test $TARGET: [$(($(date +%s) - T0)) s] $*"; }

tools/install-deps.sh --image-tools
started=""
cleanup() {
  if [ -n "$started" ] && [ "${KEEP_DOCKERD:-0}" != 1 ]; then
    step "stopping the dockerd this test started"
    kill "$started" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$started" 2>/dev/null || break; sleep 0.2; done
  fi
}
trap cleanup EXIT

if ! $DOCKER info >/dev/null 2>&1; then
  why=""
  for driver in overlay2 vfs; do
    step "starting dockerd (storage $driver)"
    dockerd --storage-driver "$driver" >"build/dockerd-$driver.log" 2>&1 &
    pid=$!
    for _ in $(seq 60); do
      $DOCKER info >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if $DOCKER info >/dev/null 2>&1; then started=$pid; break; fi
    kill "$pid" 2>/dev/null || true
    why="$why $driver: $(tail -1 "build/dockerd-$driver.log")"
  done
  if [ -z "$started" ]; then
    echo "image_test $TARGET: SKIP: no container engine can run here:$why"
    exit 0
  fi
fi

if ! $DOCKER image inspect debian:12-slim >/dev/null 2>&1 ||
   { [ "$TARGET" = gpu ] && [ ! -f "$BASE/rootfs/etc/debian_version" ]; }; then
  if [ ! -f "$BASE/rootfs/etc/debian_version" ]; then
    step "debootstrap of Debian 12 (minbase) into $BASE/rootfs"
    rm -rf "$BASE/rootfs"
    mkdir -p "$BASE"
    debootstrap --variant=minbase bookworm "$BASE/rootfs" http://deb.debian.org/debian \
      >"$BASE/debootstrap.log" 2>&1 || { tail -5 "$BASE/debootstrap.log"; exit 1; }
    rm -rf "$BASE"/rootfs/var/cache/apt/archives/*.deb "$BASE"/rootfs/var/lib/apt/lists/*
  fi
  step "docker import -> debian:12-slim"
  tar -C "$BASE/rootfs" -c . | $DOCKER import - debian:12-slim >/dev/null
fi

ARGS=(--build-arg BAKE_MODEL=0)
if [ "$TARGET" = gpu ]; then
  step "CUDA base images from this machine's toolkit (deploy/base/make-cuda-bases.sh)"
  VER=$(deploy/base/make-cuda-bases.sh "$BASE/rootfs" "$BASE" | tail -1)
  ARGS+=(--build-arg "CUDA_VERSION=$VER" --build-arg CUDA_OS=debian12)
  step "made nvidia/cuda:$VER-devel-debian12 and -runtime-debian12"
fi
step "docker build --target $TARGET -> $IMAGE"
$DOCKER build --network host -f deploy/Dockerfile --target "$TARGET" "${ARGS[@]}" \
  -t "$IMAGE" . >build/image-build-$TARGET.log 2>&1 || { tail -30 build/image-build-$TARGET.log; exit 1; }
step "built: $($DOCKER image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')"
if [ "$TARGET" = gpu ]; then
  # the binary opens the CUDA backend module from ../lib; the module links the toolkit
  libs=$($DOCKER run --rm --entrypoint ldd "$IMAGE" /opt/mantissa/lib/libmantissa_cuda.so)
  for l in libcudart libcublasLt; do
    grep -q "$l.* => /" <<<"$libs" || { echo "image_test gpu: $l not found in the image:"; echo "$libs"; exit 1; }
  done
  step "ldd in the image: the CUDA module finds libcudart and libcublasLt"
fi

step "deployment scenario on 3 containers behind nginx"
rc=0
${PYTHON:-.venv/bin/python} tests/deploy/multi_replica.py nginx --image "$IMAGE" || rc=$?
step "done (exit $rc)"
exit $rc
