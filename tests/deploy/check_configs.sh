#!/usr/bin/env bash
# check_configs.sh: validates deploy/ for real (make test-lb-configs). There
# is no Docker engine on the project's machines, so the images are not
# built; everything else is exercised with the real tools:
#   - hadolint on deploy/Dockerfile;
#   - deploy/stage-image.sh on the built binary: the image layout and the
#     runtime package list (every shared library the binary needs is owned
#     by a listed package, or pulled in by one);
#   - kubernetes-validate --strict (Kubernetes JSON schemas, unknown fields
#     are errors) and yamllint on deploy/k8s/*.yaml, then
#     tests/deploy/check_manifests.py (probes, drain budget, mounts, GPU
#     resources, selectors, Dockerfile targets agree);
#   - the ConfigMap's mantissa.json served by the real binary until ready;
#   - nginx -t and haproxy -c on the committed configs, then
#     tests/deploy/lb_check.py: each balancer runs in front of real replicas.
# Ends with "check_configs: N passed, N failed"; non-zero exit on a failure.
#
#   tests/deploy/check_configs.sh   (PYTHON: the .venv's python; BUILD: build/release)
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
PYTHON=${PYTHON:-.venv/bin/python}
BUILD=${BUILD:-build/release}
export BUILD
BIN=${MANTISSA_BIN:-$BUILD/mantissa}
VENV_BIN=$(dirname "$PYTHON")
tmp=$(mktemp -d /tmp/mantissa-check-configs.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

pass=0; fail=0; failed=()
step() { # step NAME COMMAND...: runs it, output indented, and counts it
  local name=$1; shift
  echo "== $name"
  if "$@" > "$tmp/out" 2>&1; then
    sed 's/^/   /' "$tmp/out" | tail -40
    pass=$((pass + 1))
  else
    sed 's/^/   /' "$tmp/out" | tail -40
    echo "   FAILED: $name"
    fail=$((fail + 1)); failed+=("$name")
  fi
}

need() { # the tools this needs, with where they come from
  local missing=()
  for t in nginx haproxy objdump dpkg-query; do command -v "$t" >/dev/null || missing+=("$t"); done
  for t in hadolint kubernetes-validate yamllint; do [ -x "$VENV_BIN/$t" ] || missing+=("$VENV_BIN/$t"); done
  [ -x "$BIN" ] || missing+=("$BIN (make)")
  [ -s models/all-MiniLM-L6-v2/model.safetensors ] || missing+=("the model (make model)")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "missing: ${missing[*]} (tools/install-deps.sh installs the tools)"
    return 1
  fi
}
step "tools present" need || { echo "check_configs: $pass passed, $fail failed"; exit 1; }

step "hadolint deploy/Dockerfile" "$VENV_BIN/hadolint" deploy/Dockerfile

# The image staged here is the cpu target's: its binary is built with CUDA=0
# as deploy/Dockerfile's build-cpu stage builds it (CPU_IMAGE_BIN; make
# test-lb-configs makes build/cpu/mantissa). A CUDA build links the toolkit's
# libcublasLt, which the gpu target's devel image installs from NVIDIA's
# packages and this host has only as a tarball, owned by no package.
IMAGE_BIN=${CPU_IMAGE_BIN:-$BIN}
stage() {
  local BIN=$IMAGE_BIN
  deploy/stage-image.sh "$BIN" "$tmp/stage" || return 1
  local s=$tmp/stage pkgs ok=0
  for f in opt/mantissa/bin/mantissa etc/mantissa/mantissa.json opt/mantissa/runtime-packages.txt; do
    [ -s "$s/$f" ] || { echo "image layout: $f is missing"; ok=1; }
  done
  [ -s "$s/opt/mantissa/models/all-MiniLM-L6-v2/model.safetensors" ] ||
    { echo "image layout: the weights were not staged"; ok=1; }
  # Every shared library of the binary (transitively) comes from a listed
  # package or from one of their dependencies.
  pkgs=$(cat "$s/opt/mantissa/runtime-packages.txt")
  closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
              --no-breaks --no-replaces --no-enhances $pkgs 2>/dev/null |
            grep -v '^ ' | sed 's/:.*//' | sort -u)
  while read -r lib path; do
    [ -n "$path" ] || continue
    owner=$(dpkg-query -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1)
    [ -n "$owner" ] || owner=$(dpkg-query -S "$path" 2>/dev/null | head -1 | cut -d: -f1)
    if [ -z "$owner" ] || ! grep -qx "$owner" <<<"$closure"; then
      echo "runtime packages: $lib ($path, package ${owner:-none}) is not installed by them"; ok=1
    fi
  done < <(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  echo "runtime packages: $(echo $pkgs) (closure: $(wc -l <<<"$closure") packages)"
  return $ok
}
step "image layout and runtime packages (deploy/stage-image.sh)" stage

step "kubernetes-validate --strict deploy/k8s" "$VENV_BIN/kubernetes-validate" --strict --quiet deploy/k8s/*.yaml
step "yamllint deploy/k8s" "$VENV_BIN/yamllint" -s \
  -d "{extends: default, rules: {line-length: {max: 120}, document-start: disable}}" deploy/k8s
step "manifests agree (check_manifests.py)" "$PYTHON" tests/deploy/check_manifests.py

configmap_serves() {
  # The ConfigMap's mantissa.json, model path made absolute, served by the real binary.
  "$PYTHON" - "$tmp/cm.json" <<'EOF' || return 1
import json, sys, yaml
doc = yaml.safe_load(open("deploy/k8s/configmap.yaml"))
cfg = json.loads(doc["data"]["mantissa.json"])
for m in cfg["models"]:
    m["path"] = "models/all-MiniLM-L6-v2"
json.dump(cfg, open(sys.argv[1], "w"))
EOF
  local port
  port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$BIN" serve --config "$tmp/cm.json" --listen "127.0.0.1:$port" > "$tmp/cm.log" 2>&1 &
  local pid=$!; pids+=("$pid")
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$port/v2/health/ready" 2>/dev/null; then
      curl -fsS --max-time 10 "http://127.0.0.1:$port/v1/embeddings" \
        -d '{"model":"minilm","input":"a deployment check"}' -o "$tmp/cm.out" || { kill "$pid"; return 1; }
      kill -TERM "$pid"; wait "$pid"
      echo "served deploy/k8s/configmap.yaml's config: ready and embedded ($(wc -c < "$tmp/cm.out") bytes)"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "the binary did not get ready with the ConfigMap's config:"; tail -5 "$tmp/cm.log"
  kill "$pid" 2>/dev/null
  return 1
}
step "the ConfigMap's config is served by $BIN" configmap_serves

mkdir -p "$tmp/nginx"
step "nginx -t deploy/nginx/nginx.conf" \
  nginx -t -c "$ROOT/deploy/nginx/nginx.conf" -p "$tmp/nginx" -e stderr -g "pid $tmp/nginx/nginx.pid;"
step "haproxy -c deploy/haproxy/haproxy.cfg" haproxy -c -f deploy/haproxy/haproxy.cfg
step "nginx in front of real replicas (lb_check.py)" timeout 300 "$PYTHON" tests/deploy/lb_check.py nginx
step "HAProxy in front of real replicas (lb_check.py)" timeout 300 "$PYTHON" tests/deploy/lb_check.py haproxy

echo
[ ${#failed[@]} -gt 0 ] && echo "failing: ${failed[*]}"
echo "check_configs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
