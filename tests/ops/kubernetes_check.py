#!/usr/bin/env python3
"""Checks deploy/kubernetes: a StatefulSet that runs driftd non-root and read-only, its probes
on driftd's /healthz and /readyz, the pipelines ConfigMap mounted where the container's args
read them, a volume claim for the checkpoints, and the Service the StatefulSet names. Writes
each pipeline of the ConfigMap to OUT_DIR (for `driftd validate`) and prints the container's
args as "args: ...". Exits 1 with every problem printed.
    kubernetes_check.py MANIFEST_DIR OUT_DIR"""
import os
import sys

import yaml

manifests, out_dir = sys.argv[1], sys.argv[2]
problems = []


def check(condition, what):
    if not condition:
        problems.append(what)


docs = {}
kustomization = yaml.safe_load(open(os.path.join(manifests, "kustomization.yaml")))
for resource in kustomization["resources"]:
    for doc in yaml.safe_load_all(open(os.path.join(manifests, resource))):
        docs[doc["kind"]] = doc

check(set(docs) >= {"StatefulSet", "ConfigMap", "Service"}, f"kinds: {sorted(docs)}")
sts = docs["StatefulSet"]
spec = sts["spec"]
pod = spec["template"]["spec"]
container = pod["containers"][0]
security = pod.get("securityContext", {})
check(security.get("runAsNonRoot") is True, "pod securityContext.runAsNonRoot must be true")
check(security.get("runAsUser") == 10001, "runAsUser must be the image's user 10001")
check(security.get("fsGroup") == 10001, "fsGroup 10001 so the volume is writable")
csec = container.get("securityContext", {})
check(csec.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
check(csec.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem: true")
check("ALL" in csec.get("capabilities", {}).get("drop", []), "capabilities drop ALL")

args = container["args"]
check(args[0] == "run", "args start with run")
pipelines_dir = args[1]
http = args[args.index("--http") + 1]
port = int(http.rsplit(":", 1)[1])
check(http.startswith("0.0.0.0:"), "--http must listen on all addresses in a pod")
check("--reload-on-change" in args, "--reload-on-change so ConfigMap updates apply")
ports = {p["name"]: p["containerPort"] for p in container["ports"]}
for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                    ("startupProbe", "/healthz")):
    get = container.get(probe, {}).get("httpGet", {})
    check(get.get("path") == path, f"{probe} must GET {path}")
    target = get.get("port")
    check(ports.get(target, target) == port, f"{probe} port must be the --http port {port}")

mounts = {m["name"]: m for m in container["volumeMounts"]}
volumes = {v["name"]: v for v in pod["volumes"]}
config = [name for name, v in volumes.items() if "configMap" in v]
check(len(config) == 1, "one ConfigMap volume")
config_map = docs["ConfigMap"]
if config:
    check(volumes[config[0]]["configMap"]["name"] == config_map["metadata"]["name"],
          "the volume names the ConfigMap")
    check(mounts[config[0]]["mountPath"] == pipelines_dir, "ConfigMap mounted at the args' directory")
claims = [c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])]
check(len(claims) == 1, "one volumeClaimTemplate for the checkpoints")
env = {e["name"]: e.get("value") for e in container.get("env", [])}
if claims:
    check(mounts.get(claims[0], {}).get("mountPath") == env.get("DRIFTD_CHECKPOINT_DIR"),
          "the claim is mounted at DRIFTD_CHECKPOINT_DIR")
check(pod.get("terminationGracePeriodSeconds", 30) >
      int(args[args.index("--shutdown-timeout") + 1]),
      "terminationGracePeriodSeconds above --shutdown-timeout")
check(spec["serviceName"] == docs["Service"]["metadata"]["name"], "serviceName names the Service")
check(docs["Service"]["spec"]["selector"] == spec["selector"]["matchLabels"],
      "the Service selects the pods")

os.makedirs(out_dir, exist_ok=True)
for name, text in config_map["data"].items():
    check(name.endswith((".yaml", ".yml")), f"ConfigMap key {name} must be a *.yaml file")
    with open(os.path.join(out_dir, name), "w") as f:
        f.write(text)

print("args:", " ".join(args))
for problem in problems:
    print("problem:", problem)
sys.exit(1 if problems else 0)
