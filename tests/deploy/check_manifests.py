#!/usr/bin/env python3
"""check_manifests.py: checks what the schemas cannot in deploy/k8s/*.yaml
and deploy/Dockerfile: that the pieces agree with each other and with
Mantissa (endpoints, ports, paths, the drain budget), as their headers say.

  - probes: startup and liveness on /v2/health/live, readiness on
    /v2/health/ready, on the container port the config listens on;
  - shutdown: terminationGracePeriodSeconds >= preStop sleep +
    server.drain_delay_ms + server.shutdown_grace_ms + 5 s of margin;
  - the ConfigMap is mounted as a directory (no subPath, so edits reach
    running pods) at the folder of the --config the container is given;
  - nvidia.com/gpu only in the GPU Deployment, in limits;
  - the Service, HPA and PDBs select or target what exists;
  - non-root everywhere; the Dockerfile's two targets, non-root users,
    HEALTHCHECK on /v2/health/ready, matching devel/runtime CUDA tags, and
    the same config path and port as the manifests.

  python tests/deploy/check_manifests.py   (needs PyYAML; the .venv has it)
Prints one line per check and "check_manifests: N passed, N failed".
"""
import glob
import json
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploylib import ROOT, Checks  # noqa: E402

K8S = os.path.join(ROOT, "deploy", "k8s")
MARGIN_S = 5


def load_all():
    docs = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    doc["_file"] = os.path.basename(path)
                    docs.append(doc)
    return docs


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def main():
    c = Checks("check_manifests")
    docs = load_all()
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    cms = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    deps = by_kind.get("Deployment", [])
    c.check("there are Deployments, a Service, an HPA, PDBs and a ConfigMap",
            all(by_kind.get(k) for k in ("Deployment", "Service", "HorizontalPodAutoscaler",
                                         "PodDisruptionBudget", "ConfigMap")), str(by_kind.keys()))

    for dep in deps:
        name = dep["metadata"]["name"]
        spec = dep["spec"]["template"]["spec"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        c.check("%s: selector matches its pod labels" % name,
                selects(dep["spec"]["selector"], labels))
        ctr = spec["containers"][0]
        args = ctr.get("args", [])
        cfg_path = args[args.index("--config") + 1] if "--config" in args else None
        listen = args[args.index("--listen") + 1] if "--listen" in args else None
        ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}

        # the config it mounts
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        cm_mounts = [m for m in ctr.get("volumeMounts", [])
                     if "configMap" in vols.get(m["name"], {})]
        ok = len(cm_mounts) == 1 and cfg_path is not None
        if ok:
            m = cm_mounts[0]
            cm_name = vols[m["name"]]["configMap"]["name"]
            ok = ("subPath" not in m and os.path.dirname(cfg_path) == m["mountPath"].rstrip("/")
                  and cm_name in cms and os.path.basename(cfg_path) in cms[cm_name]["data"])
        c.check("%s: the ConfigMap is mounted as a directory holding --config %s" % (name, cfg_path),
                ok, str(cm_mounts))
        if not ok:
            continue
        cfg = json.loads(cms[cm_name]["data"][os.path.basename(cfg_path)])
        server = cfg.get("server", {})
        port = int((listen or server.get("listen", "0.0.0.0:8080")).rsplit(":", 1)[1])
        c.check("%s: container port 'http' is the port Mantissa listens on (%d)" % (name, port),
                ports.get("http") == port, str(ports))

        # probes
        def probe(kind):
            p = ctr.get(kind, {}).get("httpGet", {})
            pt = p.get("port")
            return p.get("path"), ports.get(pt, pt)
        c.check("%s: startupProbe on /v2/health/live" % name,
                probe("startupProbe") == ("/v2/health/live", port), str(probe("startupProbe")))
        c.check("%s: livenessProbe on /v2/health/live" % name,
                probe("livenessProbe") == ("/v2/health/live", port), str(probe("livenessProbe")))
        c.check("%s: readinessProbe on /v2/health/ready" % name,
                probe("readinessProbe") == ("/v2/health/ready", port), str(probe("readinessProbe")))

        # the drain budget
        pre = ctr.get("lifecycle", {}).get("preStop", {})
        pre_s = 0
        if "sleep" in pre:
            pre_s = int(pre["sleep"]["seconds"])
        elif "exec" in pre:
            cmd = pre["exec"]["command"]
            pre_s = int(cmd[1]) if cmd[0] == "sleep" else None
        grace = spec.get("terminationGracePeriodSeconds", 30)
        drain = server.get("drain_delay_ms", 0) / 1000
        sg = server.get("shutdown_grace_ms")
        need = None if pre_s is None or sg is None else pre_s + drain + sg / 1000 + MARGIN_S
        c.check("%s: terminationGracePeriodSeconds %s >= preStop %ss + drain %gs + grace %ss + %ds"
                % (name, grace, pre_s, drain, None if sg is None else sg / 1000, MARGIN_S),
                need is not None and grace >= need and pre_s > 0,
                "shutdown_grace_ms must be set in the ConfigMap and preStop must sleep")

        # GPUs
        res = ctr.get("resources", {})
        gpu_lim = res.get("limits", {}).get("nvidia.com/gpu")
        gpu_req = res.get("requests", {}).get("nvidia.com/gpu")
        if "gpu" in name:
            c.check("%s: nvidia.com/gpu in limits" % name, gpu_lim is not None and int(gpu_lim) >= 1)
        else:
            c.check("%s: no nvidia.com/gpu" % name, gpu_lim is None and gpu_req is None)

        # non-root
        psc, csc = spec.get("securityContext", {}), ctr.get("securityContext", {})
        c.check("%s: runs as non-root, no privilege escalation" % name,
                psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0
                and csc.get("allowPrivilegeEscalation") is False)

    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in deps]
    for svc in by_kind.get("Service", []):
        sel = svc["spec"]["selector"]
        c.check("Service %s selects every Deployment's pods" % svc["metadata"]["name"],
                all(all(lb.get(k) == v for k, v in sel.items()) for lb in pod_labels), str(sel))
        c.check("Service %s targets the 'http' port" % svc["metadata"]["name"],
                all(p.get("targetPort") == "http" for p in svc["spec"]["ports"]))
    dep_names = {d["metadata"]["name"] for d in deps}
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        ref = hpa["spec"]["scaleTargetRef"]
        c.check("HPA %s targets an existing Deployment" % hpa["metadata"]["name"],
                ref["kind"] == "Deployment" and ref["name"] in dep_names, str(ref))
    for pdb in by_kind.get("PodDisruptionBudget", []):
        n = sum(selects(pdb["spec"]["selector"], lb) for lb in pod_labels)
        c.check("PDB %s selects exactly one Deployment's pods" % pdb["metadata"]["name"], n == 1)

    # ---- the Dockerfile ---------------------------------------------------------
    with open(os.path.join(ROOT, "deploy", "Dockerfile")) as f:
        df = f.read()
    stages = {}
    cur = None
    for line in df.splitlines():
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            cur = m.group(2) or m.group(1)
            stages[cur] = {"from": m.group(1), "lines": []}
        elif cur:
            stages[cur]["lines"].append(line)
    c.check("Dockerfile: targets gpu and cpu", "gpu" in stages and "cpu" in stages, str(stages.keys()))
    c.check("Dockerfile: gpu builds on the CUDA devel image and runs on the matching runtime",
            stages.get("build-gpu", {}).get("from", "").replace("devel", "X")
            == stages.get("gpu", {}).get("from", "").replace("runtime", "X")
            and "nvidia/cuda" in stages.get("gpu", {}).get("from", ""),
            "%s / %s" % (stages.get("build-gpu", {}).get("from"), stages.get("gpu", {}).get("from")))
    for t in ("gpu", "cpu"):
        body = "\n".join(stages.get(t, {}).get("lines", []))
        user = re.findall(r"^USER\s+(\S+)", body, re.M)
        c.check("Dockerfile %s: non-root USER" % t,
                bool(user) and user[-1].split(":")[0] not in ("root", "0"), str(user))
        c.check("Dockerfile %s: HEALTHCHECK on /v2/health/ready" % t,
                re.search(r"HEALTHCHECK[\s\S]*?/v2/health/ready", body) is not None)
        cmd = re.search(r"^CMD\s+(\[.*\])", body, re.M)
        args = json.loads(cmd.group(1)) if cmd else []
        c.check("Dockerfile %s: CMD serves /etc/mantissa/mantissa.json on :8080, as the manifests"
                % t, args[:1] == ["serve"] and "/etc/mantissa/mantissa.json" in args
                and "0.0.0.0:8080" in args, str(args))
        c.check("Dockerfile %s: exec-form ENTRYPOINT" % t,
                re.search(r'^ENTRYPOINT\s+\["', body, re.M) is not None)
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
