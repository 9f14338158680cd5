"""GPU nodes as each cloud creates them from a composed node pool, and whether a pod lands there.

A node's labels and taints are the function's (read from the composed pool, in each provider's own
field), the ones the cloud adds itself to every GPU node (its documentation, cited below), and the
labels node-feature-discovery derives from the configuration the function ships (read from the
rendered NFD chart, by the rule of NFD 0.18.3's source/pci/pci.go). `admits` is the scheduler's
node-selection rule for a pod template: nodeSelector, required node affinity, and tolerations of
every NoSchedule and NoExecute taint.
"""

from dataclasses import dataclass, field

import yaml

NVIDIA_GPU = {"class": "0302", "vendor": "10de", "device": "2330"}  # an H100 SXM: 3D controller
NFD_LABEL_PREFIX = "feature.node.kubernetes.io/"
# NFD 0.18.3 source/pci/pci.go newDefaultConfig and mandatoryDevAttrs order.
NFD_PCI_DEFAULTS = {
    "deviceClassWhitelist": ["03", "0b40", "12"],
    "deviceLabelFields": ["class", "vendor"],
}
NFD_PCI_FIELDS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")

# What each cloud puts on a GPU node by itself, besides what the pool asks for.
CLOUD_LABELS = {
    # cloud.google.com/gke-accelerator (GKE "About GPUs": node label per accelerator type).
    "NodePool": lambda fp: {
        "cloud.google.com/gke-accelerator": fp["nodeConfig"]["guestAccelerator"][0]["type"],
    },
    # eks.amazonaws.com/nodegroup (EKS managed node groups' node labels).
    "NodeGroup": lambda fp: {"eks.amazonaws.com/nodegroup": "set-by-eks"},
    # kubernetes.azure.com/accelerator=nvidia (AKS GPU node pools).
    "KubernetesClusterNodePool": lambda fp: {"kubernetes.azure.com/accelerator": "nvidia"},
    "KubernetesNodePool": lambda fp: {},
}
EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}


@dataclass
class Node:
    pool: str
    labels: dict[str, str]
    taints: list[dict] = field(default_factory=list)
    # "efa" on an EKS node whose launch template attaches EFA interfaces.
    fabric: str | None = None


def _taint(key: str, value: str, effect: str) -> dict:
    return {"key": key, "value": value, "effect": EFFECTS.get(effect, effect)}


def _pool_node(doc: dict, templates: dict[str, dict]) -> Node | None:
    """The node a composed GPU pool creates, or None for another resource or a system pool."""
    kind, fp = doc["kind"], (doc.get("spec") or {}).get("forProvider") or {}
    fabric = None
    group = doc["apiVersion"].split("/")[0]
    if kind == "NodePool" and group.startswith("container.gcp"):
        labels, taints = fp["nodeConfig"].get("labels", {}), fp["nodeConfig"].get("taint", [])
    elif kind == "NodeGroup" and group.startswith("eks.aws"):
        labels, taints = fp.get("labels", {}), fp.get("taint", [])
        template = templates.get((fp.get("launchTemplate") or {}).get("name"), {})
        # node.kubernetes.io/instance-type: the well-known label every kubelet sets.
        instance = (fp.get("instanceTypes") or [template.get("instanceType")])[0]
        labels = {"node.kubernetes.io/instance-type": instance, **labels}
        interfaces = template.get("networkInterfaces") or []
        efa = {"efa", "efa-only"}
        fabric = "efa" if any(i.get("interfaceType") in efa for i in interfaces) else None
    elif kind == "NodeGroup" and group.startswith("mk8s.nebius"):
        template = fp["template"]
        labels, taints = template.get("metadata", {}).get("labels", {}), template.get("taints", [])
    elif kind == "KubernetesClusterNodePool":
        labels = fp.get("nodeLabels", {})
        taints = []
        for text in fp.get("nodeTaints", []):
            key_value, effect = text.rsplit(":", 1)
            key, _, value = key_value.partition("=")
            taints.append({"key": key, "value": value, "effect": effect})
    elif kind == "KubernetesNodePool" and group.startswith("vke.vultr"):
        labels = {kv["key"]: kv["value"] for kv in fp.get("labels", [])}
        taints = fp.get("taints", [])
    else:
        return None
    if "modelplane.ai/gpu" not in labels:
        return None
    cloud = CLOUD_LABELS.get(kind, lambda _fp: {})(fp)
    return Node(
        pool=labels["modelplane.ai/pool"],
        labels={**cloud, **labels},
        taints=[_taint(t["key"], t.get("value", ""), t["effect"]) for t in taints],
        fabric=fabric,
    )


def gpu_nodes(docs) -> list[Node]:
    """One node of each GPU pool a cluster's composed resources create."""
    docs = list(docs)
    templates = {
        d["metadata"]["name"]: d["spec"]["forProvider"]
        for d in docs
        if d["kind"] == "LaunchTemplate"
    }
    return [n for n in (_pool_node(d, templates) for d in docs) if n is not None]


def existing_gpu_nodes(xr: dict) -> list[Node]:
    """An Existing cluster's GPU nodes as docs/clouds/existing.md asks the operator to prepare them: labelled
    with their pool, tainted nvidia.com/gpu."""
    return [
        Node(
            pool=p["name"],
            labels={"modelplane.ai/pool": p["name"]},
            taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        )
        for p in xr["spec"]["nodePools"]
    ]


def nfd_worker_config(manifests) -> dict:
    """The nfd-worker.conf of a rendered NFD chart."""
    [conf] = [
        m
        for m in manifests
        if m["kind"] == "ConfigMap" and "nfd-worker.conf" in (m.get("data") or {})
    ]
    return yaml.safe_load(conf["data"]["nfd-worker.conf"]) or {}


def nfd_labels(config: dict, devices: list[dict]) -> dict[str, str]:
    """The pci labels NFD's worker publishes for these PCI devices under this configuration."""
    pci = {**NFD_PCI_DEFAULTS, **((config.get("sources") or {}).get("pci") or {})}
    fields = [f for f in NFD_PCI_FIELDS if f in pci["deviceLabelFields"]] or ["class", "vendor"]
    labels = {}
    for device in devices:
        if any(device["class"].startswith(w.lower()) for w in pci["deviceClassWhitelist"]):
            name = "_".join(device[f] for f in fields)
            labels[f"{NFD_LABEL_PREFIX}pci-{name}.present"] = "true"
    return labels


def rule_labels(rules: list[dict], devices: list[dict]) -> dict[str, str]:
    """The labels NFD's master gives a node with these PCI devices for its NodeFeatureRules: the
    rules whose every matchFeatures term is pci.device with `In` expressions some one device
    meets (the only shape the function composes; anything else matches nothing here). An
    unprefixed label gets feature.node.kubernetes.io/ (NFD docs, "Custom resources")."""
    labels = {}
    for rule in (r for nfr in rules for r in (nfr.get("spec") or {}).get("rules") or []):
        terms = rule.get("matchFeatures") or []
        if terms and all(_device_term(t, devices) for t in terms):
            for key, value in (rule.get("labels") or {}).items():
                labels[key if "/" in key else NFD_LABEL_PREFIX + key] = value
    return labels


def _device_term(term: dict, devices: list[dict]) -> bool:
    expressions = term.get("matchExpressions") or {}
    return term.get("feature") == "pci.device" and any(
        all(
            e.get("op") == "In" and device.get(attr) in e.get("value", [])
            for attr, e in expressions.items()
        )
        for device in devices
    )


def _matches(expression: dict, labels: dict[str, str]) -> bool:
    key, op, values = expression["key"], expression["operator"], expression.get("values", [])
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels:
            return False
        have, want = int(labels[key]), int(values[0])
        return have > want if op == "Gt" else have < want
    raise AssertionError(f"unknown operator {op}")


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and t.get("value", "") == taint["value"]:
            return True
    return False


def why_not(pod_spec: dict, node: Node) -> str | None:
    """Why the scheduler would not place this pod on the node, or None if it would."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms and not any(
        all(_matches(e, node.labels) for e in term.get("matchExpressions", [])) for term in terms
    ):
        return f"required node affinity {terms}"
    for taint in node.taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(
            pod_spec.get("tolerations") or [], taint
        ):
            return f"taint {taint['key']}={taint['value']}:{taint['effect']}"
    return None
