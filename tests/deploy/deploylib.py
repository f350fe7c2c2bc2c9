"""deploylib.py: what the deployment tests in tests/deploy share: real
Mantissa replicas and real nginx / HAProxy processes on loopback, started
from the committed configs with only their addresses rewritten, plus a
small HTTP client. Everything started here is a child process that
`Procs.stop_all()` ends by its own pid; every wait is bounded.

A replica is a process, or (with IMAGE set, make test-image) a container of
that image: `Container` has the process's interface (name, port,
send_signal, poll, wait, kill) and its config is a mounted folder swapped
the way a Kubernetes ConfigMap is (`write_config`).

Standard library only, so the tests run with the system python3 too.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL_DIR = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")


def mantissa_bin():
    build = os.environ.get("BUILD", "build/release")
    return os.environ.get("MANTISSA_BIN", os.path.join(ROOT, build, "mantissa"))


def free_port():
    """A loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method="GET", path="/v2/health/ready", body=None, headers=None, timeout=30):
    """One HTTP request on a fresh connection: (status, headers dict lower-cased,
    body bytes), or (None, {}, error text) when the connection failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        payload = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, payload
    except (OSError, http.client.HTTPException) as e:
        return None, {}, repr(e).encode()
    finally:
        conn.close()


def embed(port, text="A man is playing a guitar.", headers=None, timeout=30):
    return request(port, "POST", "/v1/embeddings",
                   {"model": "minilm", "input": [text]}, headers, timeout)


def replica_config(variant="fp32", precision="fp32", server=None):
    """A config like config/mantissa.json with one variant, the model path
    absolute so that replicas may run from any folder."""
    with open(os.path.join(ROOT, "config", "mantissa.json")) as f:
        cfg = json.load(f)
    cfg["server"].update(server or {})
    m = cfg["models"][0]
    m["path"] = MODEL_DIR
    m["variants"] = [{"name": variant, "precision": precision, "traffic": 100}]
    return cfg


class Procs:
    """Child processes of a test, each with its log file."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []
        self.containers = []

    def start(self, name, argv):
        log = open(os.path.join(self.workdir, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                             start_new_session=True)
        p.name, p.log_path = name, log.name
        log.close()
        self.procs.append(p)
        return p

    def log_tail(self, p, n=15):
        if isinstance(p, Container):
            return docker_logs(p.name, n)
        try:
            with open(p.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def stop_all(self):
        for c in self.containers:
            c.remove()
        # SIGTERM first, so that nginx's master reaps its workers; then a
        # SIGKILL to each child's process group (each leads its own, see
        # start), for whatever is left.
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.time() + 5
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


IMAGE = None               # a container image: replicas are containers of it
DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")
IMAGE_MODEL = "/opt/mantissa/models/all-MiniLM-L6-v2"
IMAGE_UID = "10001"


def docker(*args, timeout=60, check=True):
    r = subprocess.run([DOCKER] + list(args), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("docker %s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
    return r.stdout.strip()


def docker_logs(name, tail=None):
    """A container's output (its stdout and stderr, in order)."""
    args = [DOCKER, "logs"] + (["--tail", str(tail)] if tail else []) + [name]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        timeout=30)
    return r.stdout


class Container:
    """A replica in a container of IMAGE, published on 127.0.0.1:port, its
    root filesystem read-only, the weights and a ConfigMap-style config
    folder mounted read-only (/etc/mantissa: mantissa.json -> ..data/
    mantissa.json, ..data -> a timestamped folder, swapped by renaming a new
    ..data link over the old one)."""

    def __init__(self, workdir, name, port, cfg):
        self.name, self.port, self.workdir = name, port, workdir
        self.cfgdir = os.path.join(workdir, name + ".configmap")
        os.makedirs(self.cfgdir)
        self.generation = 0
        self.write_config(cfg)
        os.symlink("..data/mantissa.json", os.path.join(self.cfgdir, "mantissa.json"))
        self.log_path = os.path.join(workdir, name + ".log")
        self.cid = docker("run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp",
                          "-p", "127.0.0.1:%d:8080" % port,
                          "-v", "%s:/etc/mantissa:ro" % self.cfgdir,
                          "-v", "%s:%s:ro" % (MODEL_DIR, IMAGE_MODEL), IMAGE)
        self.exit = None

    def write_config(self, cfg):
        cfg = json.loads(json.dumps(cfg))
        cfg["server"]["listen"] = "0.0.0.0:8080"
        for m in cfg["models"]:
            m["path"] = IMAGE_MODEL
        self.generation += 1
        gen = "..%s_%d" % (time.strftime("%Y_%m_%d_%H_%M_%S"), self.generation)
        os.makedirs(os.path.join(self.cfgdir, gen))
        with open(os.path.join(self.cfgdir, gen, "mantissa.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        os.chmod(os.path.join(self.cfgdir, gen), 0o755)
        tmp = os.path.join(self.cfgdir, "..data_tmp")
        os.symlink(gen, tmp)
        os.replace(tmp, os.path.join(self.cfgdir, "..data"))

    def state(self, fmt):
        return docker("inspect", "-f", fmt, self.name, check=False)

    def poll(self):
        if self.exit is None:
            out = self.state("{{.State.Running}} {{.State.ExitCode}}").split()
            if len(out) == 2 and out[0] == "false":
                self.exit = int(out[1])
        return self.exit

    def wait(self, timeout=None):
        end = time.time() + (timeout if timeout is not None else 3600)
        while self.poll() is None:
            if time.time() > end:
                raise subprocess.TimeoutExpired(self.name, timeout)
            time.sleep(0.1)
        return self.exit

    def send_signal(self, sig):
        docker("kill", "-s", signal.Signals(sig).name, self.name, check=False)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def health(self):
        return self.state("{{.State.Health.Status}}")

    def remove(self):
        with open(self.log_path, "w") as f:
            f.write(docker_logs(self.name))
        docker("rm", "-f", self.name, check=False, timeout=60)


def start_replica(procs, name, port, cfg):
    if IMAGE:
        c = Container(procs.workdir, name, port, cfg)
        procs.containers.append(c)
        return c
    path = os.path.join(procs.workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    p = procs.start(name, [mantissa_bin(), "serve", "--config", path,
                           "--listen", "127.0.0.1:%d" % port])
    p.port, p.config_path = port, path
    return p


def write_replica_config(r, cfg):
    """A replica's new config, as a deployment would write it: a container's
    by a ConfigMap swap, a process's as editors and the kubelet do (a new
    file renamed over the old one)."""
    if isinstance(r, Container):
        r.write_config(cfg)
        return
    tmp = r.config_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2)
    os.replace(tmp, r.config_path)


def wait_ready(port, proc=None, timeout=60):
    """Polls /v2/health/ready until 200; False on timeout or if proc died."""
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            return False
        st, _, _ = request(port, timeout=2)
        if st == 200:
            return True
        time.sleep(0.1)
    return False


def rewrite_ports(text, mapping):
    """Replaces each committed address (127.0.0.1:8081, ...) or listener
    port (listen 8080; bind :8080) by the test's own."""
    for old, new in mapping.items():
        text = re.sub(r"127\.0\.0\.1:%d\b" % old, "127.0.0.1:%d" % new, text)
        text = re.sub(r"(listen\s+)%d;" % old, r"\g<1>127.0.0.1:%d;" % new, text)
        text = re.sub(r"(bind\s+):%d\b" % old, r"\g<1>127.0.0.1:%d" % new, text)
    return text


def start_nginx(procs, mapping):
    """nginx on deploy/nginx/nginx.conf with ports rewritten, in the foreground."""
    with open(os.path.join(ROOT, "deploy", "nginx", "nginx.conf")) as f:
        conf = rewrite_ports(f.read(), mapping)
    conf = conf.replace("access_log /dev/stdout", "access_log %s/nginx-access.log" % procs.workdir)
    prefix = os.path.join(procs.workdir, "nginx")
    os.makedirs(prefix, exist_ok=True)
    path = os.path.join(procs.workdir, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    user = "user root;" if os.geteuid() == 0 else ""
    return procs.start("nginx", ["nginx", "-c", path, "-p", prefix, "-e", "stderr", "-g",
                                 "daemon off; pid %s/nginx.pid; %s" % (prefix, user)])


def start_haproxy(procs, mapping):
    """HAProxy on deploy/haproxy/haproxy.cfg with ports rewritten, in the foreground."""
    with open(os.path.join(ROOT, "deploy", "haproxy", "haproxy.cfg")) as f:
        conf = rewrite_ports(f.read(), mapping)
    path = os.path.join(procs.workdir, "haproxy.cfg")
    with open(path, "w") as f:
        f.write(conf)
    return procs.start("haproxy", ["haproxy", "-db", "-f", path])


def workdir(prefix):
    return tempfile.mkdtemp(prefix=prefix)


def remove_workdir(wd, rc):
    """Removes a test's work folder when it passed; keeps it (logs) otherwise."""
    if rc == 0:
        shutil.rmtree(wd, ignore_errors=True)
    else:
        print("logs kept in %s" % wd)
    return rc


def supports_precision(precision, workdir_):
    """Whether this build loads a variant of that precision (mantissa embed)."""
    return accepts_config(replica_config(precision, precision), workdir_, precision)


def accepts_config(cfg, workdir_, tag="probe"):
    """Whether this build loads cfg and embeds with it (mantissa embed)."""
    path = os.path.join(workdir_, "probe-%s.json" % tag)
    with open(path, "w") as f:
        json.dump(cfg, f)
    try:
        r = subprocess.run([mantissa_bin(), "embed", "--config", path], input=b"x\n",
                           capture_output=True, timeout=120)
        return r.returncode == 0
    except subprocess.TimeoutExpired:
        return False


class Checks:
    """Named pass/fail results, printed as they come and summed at the end."""

    def __init__(self, title):
        self.title, self.passed, self.failed = title, 0, []

    def check(self, name, ok, detail=""):
        print("  %s %s%s" % ("ok  " if ok else "FAIL", name, "" if ok else ": " + detail),
              flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)
        return ok

    def summary(self):
        print("%s: %d passed, %d failed" % (self.title, self.passed, len(self.failed)))
        return 0 if not self.failed else 1
