#!/usr/bin/env python3
"""Checks deploy/kubernetes (base/, as kustomization.yaml applies it) and its scale-out variant
(scale-out/, an overlay of base/) with PyYAML: a StatefulSet that runs driftd non-root and
read-only, its probes on driftd's /healthz and /readyz, the pipelines ConfigMap mounted where
the container's args read them, a volume claim for the checkpoints, the Service the StatefulSet
names, and the Prometheus Operator ServiceMonitor that scrapes it. Each pipeline of the ConfigMap must be the example of
the same name in deploy/examples, byte for byte. In the default variant every pod runs its own
pipeline; in the scale-out variant the pods are the instances of one scaled-out pipeline.

The overlay is rendered here (resources, and JSON 6902 patches with add, replace, remove and
test); when kubectl with kustomize v4 or later is on PATH, its `kubectl kustomize` must render
the same objects.

Writes each pipeline of the ConfigMap to OUT_DIR (for `driftd validate`), and prints the
container's args as "args: ..." and, per variant, the environment a pod's driftd sees as
"env VARIANT NAME=VALUE" lines. Exits 1 with every problem printed.
    kubernetes_check.py MANIFEST_DIR OUT_DIR
    kubernetes_check.py --update-configmap MANIFEST_DIR   rewrites configmap.yaml's pipelines
                                                          from deploy/examples"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

problems = []


def check(condition, what):
    if not condition:
        problems.append(what)


# ---- rendering a kustomization ------------------------------------------------------------

def pointer(path):
    return [part.replace("~1", "/").replace("~0", "~") for part in path.lstrip("/").split("/")]


def apply_json6902(doc, operations, where):
    for op in operations:
        *parents, last = pointer(op["path"])
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        kind = op["op"]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if kind == "add":
                node.insert(index, copy.deepcopy(op["value"]))
            elif kind == "replace":
                node[index] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[index]
            elif kind == "test":
                if node[index] != op["value"]:
                    raise ValueError(f"{where}: test of {op['path']} failed: {node[index]!r}")
            else:
                raise ValueError(f"{where}: unsupported op {kind}")
        else:
            if kind in ("add", "replace"):
                if kind == "replace" and last not in node:
                    raise ValueError(f"{where}: replace of missing {op['path']}")
                node[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[last]
            elif kind == "test":
                if node.get(last) != op["value"]:
                    raise ValueError(f"{where}: test of {op['path']} failed: {node.get(last)!r}")
            else:
                raise ValueError(f"{where}: unsupported op {kind}")


def render(directory):
    """The objects `kubectl kustomize DIRECTORY` would print, for the fields used here."""
    path = os.path.join(directory, "kustomization.yaml")
    kustomization = yaml.safe_load(open(path))
    allowed = {"apiVersion", "kind", "resources", "patches"}
    check(set(kustomization) <= allowed,
          f"{path}: fields this check cannot render: {sorted(set(kustomization) - allowed)}")
    docs = []
    for resource in kustomization.get("resources", []):
        full = os.path.normpath(os.path.join(directory, resource))
        if os.path.isdir(full):
            docs.extend(render(full))
        else:
            docs.extend(doc for doc in yaml.safe_load_all(open(full)) if doc)
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        if "patch" in patch:
            text = patch["patch"]
        else:
            text = open(os.path.join(directory, patch["path"])).read()
        operations = yaml.safe_load(text)
        matched = [d for d in docs if d["kind"] == target.get("kind", d["kind"]) and
                   d["metadata"]["name"] == target.get("name", d["metadata"]["name"])]
        check(len(matched) == 1, f"{path}: patch target {target} matches {len(matched)} objects")
        for doc in matched:
            apply_json6902(doc, operations, path)
    return docs


def kustomize_version():
    """The major version of kubectl's kustomize, or 0 without one (kubectl before 1.24 does not
    print it, and its kustomize is older than the patches field)."""
    if not shutil.which("kubectl"):
        return 0
    out = subprocess.run(["kubectl", "version", "--client"], capture_output=True, text=True).stdout
    match = re.search(r"Kustomize Version: v(\d+)", out)
    return int(match.group(1)) if match else 0


def key(doc):
    return (doc["kind"], doc["metadata"]["name"])


def compare_with_kubectl(directory, docs):
    result = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True)
    check(result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr.strip()}")
    if result.returncode != 0:
        return
    theirs = {key(d): d for d in yaml.safe_load_all(result.stdout) if d}
    ours = {key(d): d for d in docs}
    check(sorted(theirs) == sorted(ours),
          f"kubectl kustomize {directory} renders {sorted(theirs)}, this check {sorted(ours)}")
    for k in sorted(set(theirs) & set(ours)):
        check(json.dumps(theirs[k], sort_keys=True) == json.dumps(ours[k], sort_keys=True),
              f"kubectl kustomize {directory} renders {k} differently from this check")


# ---- the ConfigMap and the examples -------------------------------------------------------

def examples_dir(manifests):
    return os.path.normpath(os.path.join(manifests, "..", "examples"))


def update_configmap(manifests):
    path = os.path.join(manifests, "base", "configmap.yaml")
    text = open(path).read()
    head, _, _ = text.partition("\ndata:\n")
    names = list(yaml.safe_load(text)["data"])
    lines = [head, "data:"]
    for name in names:
        example = open(os.path.join(examples_dir(manifests), name)).read()
        lines.append(f"  {name}: |")
        lines.extend(("    " + line) if line else "" for line in example.rstrip("\n").split("\n"))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"rewrote {path} from {', '.join(names)}")


def check_configmap(manifests, config_map):
    for name, text in config_map["data"].items():
        check(name.endswith((".yaml", ".yml")), f"ConfigMap key {name} must be a *.yaml file")
        example = os.path.join(examples_dir(manifests), name)
        if not os.path.exists(example):
            check(False, f"ConfigMap key {name} names no example in deploy/examples")
            continue
        check(open(example).read() == text,
              f"ConfigMap key {name} differs from deploy/examples/{name}: run "
              f"python3 tests/ops/kubernetes_check.py --update-configmap deploy/kubernetes")


# ---- the objects --------------------------------------------------------------------------

def by_kind(docs):
    kinds = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], []).append(doc)
    return {kind: items[0] for kind, items in kinds.items() if len(items) == 1}


def check_variant(name, docs, manifests):
    """Checks one rendering; returns (container args, the pod's driftd environment, ConfigMap)."""
    kinds = by_kind(docs)
    check(set(kinds) >= {"StatefulSet", "ConfigMap", "Service"}, f"{name}: kinds {sorted(kinds)}")
    sts = kinds["StatefulSet"]
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
        check(get.get("path") == path, f"{name}: {probe} must GET {path}")
        target = get.get("port")
        check(ports.get(target, target) == port,
              f"{name}: {probe} port must be the --http port {port}")

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config = [n for n, v in volumes.items() if "configMap" in v]
    check(len(config) == 1, f"{name}: one ConfigMap volume")
    config_map = kinds["ConfigMap"]
    if config:
        check(volumes[config[0]]["configMap"]["name"] == config_map["metadata"]["name"],
              f"{name}: the volume names the ConfigMap")
        check(mounts[config[0]]["mountPath"] == pipelines_dir,
              f"{name}: ConfigMap mounted at the args' directory")
    check_configmap(manifests, config_map)
    claims = [c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])]
    check(len(claims) == 1, f"{name}: one volumeClaimTemplate for the checkpoints")

    # The environment driftd sees in the StatefulSet's first pod.
    pod_name = sts["metadata"]["name"] + "-0"
    env = {"HOSTNAME": pod_name}
    fields = {}
    for entry in container.get("env", []):
        check(entry["name"] not in env or entry["name"] == "HOSTNAME",
              f"{name}: env {entry['name']} given twice")
        check(("value" in entry) != ("valueFrom" in entry),
              f"{name}: env {entry['name']} needs exactly one of value and valueFrom")
        if "valueFrom" in entry:
            field = entry["valueFrom"].get("fieldRef", {}).get("fieldPath")
            check(field == "metadata.name", f"{name}: env {entry['name']}: only metadata.name here")
            env[entry["name"]] = pod_name
            fields[entry["name"]] = field
        else:
            env[entry["name"]] = str(entry.get("value"))
    if claims:
        check(mounts.get(claims[0], {}).get("mountPath") == env.get("DRIFTD_CHECKPOINT_DIR"),
              f"{name}: the claim is mounted at DRIFTD_CHECKPOINT_DIR")
    check(pod.get("terminationGracePeriodSeconds", 30) >
          int(args[args.index("--shutdown-timeout") + 1]),
          f"{name}: terminationGracePeriodSeconds above --shutdown-timeout")
    service = kinds["Service"]
    check(spec["serviceName"] == service["metadata"]["name"],
          f"{name}: serviceName names the Service")
    check(service["spec"]["selector"] == spec["selector"]["matchLabels"],
          f"{name}: the Service selects the pods")

    scaled_out = env.get("SCALE_OUT") == "true"
    if name == "default":
        # replicas > 1 here are separate pipelines: each pod's name names its own.
        check(not scaled_out, "default: SCALE_OUT must not be true")
        check(fields.get("PIPELINE_NAME") == "metadata.name",
              "default: PIPELINE_NAME is the pod's name, so replicas do not fence each other")
    else:
        check(scaled_out, f"{name}: SCALE_OUT=true")
        check("PIPELINE_NAME" in env and "PIPELINE_NAME" not in fields,
              f"{name}: one PIPELINE_NAME for every pod (the consumer group they share)")
        check(spec.get("replicas", 1) > 1, f"{name}: more than one replica")
        check(spec.get("podManagementPolicy") == "Parallel",
              f"{name}: podManagementPolicy Parallel (instances join the group together)")
    return args, env, config_map


def check_service_monitor(path, service):
    monitor = yaml.safe_load(open(path))
    check(monitor["apiVersion"] == "monitoring.coreos.com/v1" and
          monitor["kind"] == "ServiceMonitor",
          "servicemonitor.yaml: a monitoring.coreos.com/v1 ServiceMonitor")
    labels = service["metadata"].get("labels", {})
    selector = monitor["spec"]["selector"].get("matchLabels", {})
    check(selector and all(labels.get(k) == v for k, v in selector.items()),
          "the ServiceMonitor selects the Service by its labels")
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    endpoints = monitor["spec"]["endpoints"]
    check(len(endpoints) >= 1, "the ServiceMonitor has an endpoint")
    for endpoint in endpoints:
        check(endpoint.get("port") in service_ports,
              f"ServiceMonitor endpoint port {endpoint.get('port')} is one of the Service's")
        check(endpoint.get("path", "/metrics") == "/metrics", "the ServiceMonitor scrapes /metrics")


def main():
    if sys.argv[1] == "--update-configmap":
        update_configmap(sys.argv[2])
        return 0
    manifests, out_dir = sys.argv[1], sys.argv[2]
    variants = {"default": manifests}
    for entry in sorted(os.listdir(manifests)):
        if entry != "base" and os.path.exists(os.path.join(manifests, entry, "kustomization.yaml")):
            variants[entry] = os.path.join(manifests, entry)
    check("scale-out" in variants, "a scale-out variant (deploy/kubernetes/scale-out)")
    with_kubectl = kustomize_version() >= 4
    print("kubectl kustomize:", "compared" if with_kubectl else "not available, not compared")

    os.makedirs(out_dir, exist_ok=True)
    first_args = None
    for name, directory in variants.items():
        docs = render(directory)
        if with_kubectl:
            compare_with_kubectl(directory, docs)
        args, env, config_map = check_variant(name, docs, manifests)
        first_args = first_args or args
        for key_name, value in sorted(env.items()):
            print(f"env {name} {key_name}={value}")
        if name == "default":
            check_service_monitor(os.path.join(manifests, "servicemonitor.yaml"),
                                  by_kind(docs)["Service"])
            for file_name, text in config_map["data"].items():
                with open(os.path.join(out_dir, file_name), "w") as f:
                    f.write(text)

    print("args:", " ".join(first_args))
    for problem in dict.fromkeys(problems):  # once each, in order (variants share objects)
        print("problem:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
