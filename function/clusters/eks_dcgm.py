"""Where EKS's node monitoring agent runs its DCGM host engine (dcgm-server), which the DCGM
exporter reads instead of starting a second one (function/serving/gpu_metrics.py), and where the
function has it run (the add-on's configuration, function/clusters/eks.py).

The agent's chart places dcgm-server by `dcgmAgent.affinity` (aws/eks-node-monitoring-agent
charts/eks-node-monitoring-agent/values.yaml): amd64 only since the chart's first commit, on a
list of NVIDIA instance types that grew with each version (every earlier version's list is within
v1.7.0's, read at each commit to v1.7.0). On an amd64 GPU node off that list the agent's NVIDIA
monitor still runs, finds no host engine on localhost:5555 and reports DCGMError, Fatal, under
AcceleratedHardwareReady (monitors/nvidia/dcgm/dcgm_reconcile.go, pkg/reasons/reasons.yaml at
v1.7.0), on which node repair reboots or replaces the node after 10 minutes (EKS User Guide,
"Automatically repair nodes"): a pool of a type the list lacks (one newer than the agent, or one
the function does not know, composed as asked) would be repaired for ever. So where the add-on
takes `dcgmAgent.affinity` (its configuration schema has it from v1.6.3,
charts/configuration.schema.json, `additionalProperties: false` before), the function widens it
to every amd64 node NFD labels as an NVIDIA GPU node (OWNED_AFFINITY); where it does not (an older
agent, or before the add-on's version is read), the chart's own placement stands (LISTED).
"""

import json
import re

from function.inputs import ObservedResource
from function.workload import GPU_NODE_LABEL

# The list of dcgmAgent.affinity at v1.7.0 (77 NVIDIA types).
EKS_DCGM_INSTANCE_TYPES = (
    *(f"g3.{s}" for s in ("16xlarge", "4xlarge", "8xlarge")),
    "g3s.xlarge",
    *(f"g4dn.{s}" for s in ("12xlarge", "16xlarge", "2xlarge", "4xlarge", "8xlarge", "metal")),
    "g4dn.xlarge",
    *(f"g5.{s}" for s in ("12xlarge", "16xlarge", "24xlarge", "2xlarge", "48xlarge")),
    *(f"g5.{s}" for s in ("4xlarge", "8xlarge", "xlarge")),
    *(f"g5g.{s}" for s in ("16xlarge", "2xlarge", "4xlarge", "8xlarge", "metal", "xlarge")),
    *(f"g6.{s}" for s in ("12xlarge", "16xlarge", "24xlarge", "2xlarge", "48xlarge")),
    *(f"g6.{s}" for s in ("4xlarge", "8xlarge", "xlarge")),
    *(f"g6e.{s}" for s in ("12xlarge", "16xlarge", "24xlarge", "2xlarge", "48xlarge")),
    *(f"g6e.{s}" for s in ("4xlarge", "8xlarge", "xlarge")),
    *(f"g6f.{s}" for s in ("2xlarge", "4xlarge", "large", "xlarge")),
    *(f"g7.{s}" for s in ("12xlarge", "24xlarge", "2xlarge", "48xlarge", "4xlarge", "8xlarge")),
    *(f"g7e.{s}" for s in ("12xlarge", "24xlarge", "2xlarge", "48xlarge", "4xlarge", "8xlarge")),
    "gr6.4xlarge",
    "gr6.8xlarge",
    "gr6f.4xlarge",
    *(f"p2.{s}" for s in ("16xlarge", "8xlarge", "xlarge")),
    *(f"p3.{s}" for s in ("16xlarge", "2xlarge", "8xlarge")),
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5.4xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "p6e-gb300.36xlarge",
)
# The agent's other requirements: not on Fargate, Auto Mode, hybrid or HyperPod nodes, whose DCGM
# the function does not know (it composes none of them); the exporter keeps off them too.
EKS_NODES = (
    {
        "key": "eks.amazonaws.com/compute-type",
        "operator": "NotIn",
        "values": ["fargate", "auto", "hybrid"],
    },
    {"key": "sagemaker.amazonaws.com/compute-type", "operator": "NotIn", "values": ["hyperpod"]},
)
INSTANCE_TYPE, ARCH = "node.kubernetes.io/instance-type", "kubernetes.io/arch"
AMD64 = {"key": ARCH, "operator": "In", "values": ["amd64"]}
NVIDIA = {"key": GPU_NODE_LABEL, "operator": "In", "values": ["true"]}
# The chart's own placement at v1.7.0: one term.
LISTED = (
    {"key": INSTANCE_TYPE, "operator": "In", "values": list(EKS_DCGM_INSTANCE_TYPES)},
    *EKS_NODES,
    AMD64,
)
# The function's: the chart's, or any amd64 NVIDIA node (a term each).
WIDENED = (NVIDIA, *EKS_NODES, AMD64)
OWNED_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": list(LISTED)},
                {"matchExpressions": list(WIDENED)},
            ]
        }
    }
}
# The add-on's composed resource (function/clusters/eks.py, one per EKS_ADDONS entry).
ADDON = "eks-node-monitoring-agent"
ADDON_KEY = f"addon-{ADDON}"
# The first version whose configuration schema takes dcgmAgent.affinity.
OWNED_FROM = (1, 6, 3)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def owned(addon: ObservedResource | None) -> bool:
    """Whether the observed add-on takes the function's placement of dcgm-server: its version
    is OWNED_FROM or later, or its configuration already carries the placement (sent once, kept:
    a reconcile whose observation lost the add-on's status changes nothing). False while neither
    is read."""
    if addon is None:
        return False
    if "affinity" in _dcgm_agent(addon.get("spec", "forProvider", "configurationValues")):
        return True
    found = version(addon)
    return found is not None and found >= OWNED_FROM


def version(addon: ObservedResource | None) -> tuple[int, int, int] | None:
    """The add-on's version as EKS reports it (v1.7.0-eksbuild.1) or as late-initialised into
    its spec, as numbers; None while neither is read."""
    if addon is None:
        return None
    for named in (
        addon.at_provider("addonVersion"),
        addon.get("spec", "forProvider", "addonVersion"),
    ):
        found = _VERSION.match(named) if isinstance(named, str) else None
        if found is not None:
            major, minor, patch = (int(n) for n in found.groups())
            return major, minor, patch
    return None


def outdated(addon: ObservedResource | None, name: str) -> str | None:
    """What to tell the operator of an add-on read to be older than OWNED_FROM (its placement is
    the chart's list, which only a newer agent widens, and EKS never moves an add-on by itself);
    None otherwise. name: the Addon's."""
    found = version(addon)
    if found is None or owned(addon):
        return None
    named = ".".join(map(str, found))
    least = ".".join(map(str, OWNED_FROM))
    return (
        f"the EKS node monitoring agent add-on is v{named}: before v{least} its DCGM host engine "
        "runs only on the instance types its chart lists, and on a GPU node of another type the "
        "agent reports DCGMError, on which node repair reboots or replaces the node; set "
        f"spec.forProvider.addonVersion of the Addon {name} to v{least} or later (aws eks "
        "describe-addon-versions --addon-name eks-node-monitoring-agent), and the function "
        "places the host engine on every amd64 NVIDIA GPU node"
    )


def _dcgm_agent(values) -> dict:
    """The dcgmAgent section of an add-on's configuration (a JSON string), or {}."""
    try:
        parsed = json.loads(values) if isinstance(values, str) else None
    except ValueError:
        return {}
    agent = parsed.get("dcgmAgent") if isinstance(parsed, dict) else None
    return agent if isinstance(agent, dict) else {}
