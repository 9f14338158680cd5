"""Hypothesis strategies for InferenceClusters the XRD admits, with InferenceClasses that fit them.

Built from the XRD's own limits and rules: field by field the schema's types, enums, lengths and
defaults, and the CEL rules as constraints on what is drawn (a source's block, zones of its
region, InfiniBand only on Nebius and AKS with its fabric block on Nebius, EFA and Capacity Blocks
only on EKS with one zone, AKS agent-pool names, Vultr's exact versions, ranges). The API table
test proves the rules reject what this never draws; tests/test_reliability.py proves, through the
real `crossplane beta validate`, that everything it draws is admitted.
"""

import string

from hypothesis import strategies as st

from function import shapes

SOURCES = ["GKE", "EKS", "AKS", "Nebius", "Vultr", "Existing"]
REGIONS = {
    "GKE": ["us-central1", "europe-west4", "asia-northeast1"],
    "EKS": ["us-east-1", "us-east-2", "us-west-2", "eu-west-1", "us-west-1", "ap-northeast-1"],
    "AKS": ["westeurope", "eastus", "swedencentral"],
    "Vultr": ["ewr", "fra", "sjc"],
}
DNS = string.ascii_lowercase + string.digits
LABEL_VALUE = string.ascii_letters + string.digits + "-_."

# Shapes per cloud: known ones from function/shapes.py, plus some the table does not know.
EKS_TYPES = [*sorted(shapes.EC2), "p9.96xlarge"]
GKE_SHAPES = [
    (machine, accelerator, count)
    for accelerator, machines in sorted(shapes.GKE_ACCELERATORS.items())
    for machine, count in sorted(machines.items())
] + [("n1-standard-16", "nvidia-tesla-t4", 2)]
AKS_SIZES = [*sorted(shapes.AKS_SIZES), "Standard_ND96isr_H100_v5", "Standard_NC999_v9"]
NEBIUS_SHAPES = [
    (platform, preset)
    for platform, presets in sorted(shapes.NEBIUS_PRESETS.items())
    for preset in sorted(presets)
]
VULTR_PLANS = ["vcg-l40s-16c-180g-48vram", "vcg-a100-12c-120g-80vram", "vcg-a16-2c-8g-2vram"]


def dns_label(max_size: int = 20) -> st.SearchStrategy[str]:
    return st.text(DNS, min_size=1, max_size=max_size).filter(lambda s: s[0].isalnum())


def label_value(max_size: int) -> st.SearchStrategy[str]:
    """A Kubernetes label value: alphanumerics at both ends, -_. inside."""
    inner = st.text(LABEL_VALUE, max_size=max(0, max_size - 2))
    return st.builds(
        lambda a, mid, b: (a + mid + b)[:max_size] if b else a,
        st.sampled_from(string.ascii_letters + string.digits),
        inner,
        st.sampled_from(["", *string.ascii_letters, *string.digits]),
    ).filter(lambda s: s[-1].isalnum())


@st.composite
def credentials(draw) -> dict:
    out: dict = {}
    if draw(st.booleans()):
        out["name"] = draw(dns_label(30))
    if draw(st.booleans()):
        out["type"] = draw(st.sampled_from(["ProviderConfig", "ClusterProviderConfig"]))
    return out


@st.composite
def cluster_block(draw, source: str) -> dict:
    if source == "Existing":
        block: dict = {"secretRef": {"name": draw(dns_label(30))}}
        if draw(st.booleans()):
            block["secretRef"]["key"] = draw(st.sampled_from(["kubeconfig", "config"]))
        if draw(st.booleans()):
            block["identitySecretRef"] = {
                "name": draw(dns_label(30)),
                "type": draw(
                    st.sampled_from(
                        [
                            "GoogleApplicationCredentials",
                            "AWSWebIdentityCredentials",
                            "NebiusServiceAccountCredentials",
                        ]
                    )
                ),
            }
        if draw(st.booleans()):
            block["cache"] = {"storageClassName": draw(dns_label(30))}
        return block
    block = {}
    if source in REGIONS:
        block["region" if source != "AKS" else "location"] = draw(st.sampled_from(REGIONS[source]))
    if draw(st.booleans()):
        block["credentials"] = draw(credentials())
    if draw(st.booleans()):
        block["kubernetesVersion"] = (
            draw(st.sampled_from(["v1.36.1+3", "v1.35.4+12"]))
            if source == "Vultr"
            else draw(st.sampled_from(["1.34", "1.35", "1.36"]))
        )
    return block


def region_of(source: str, block: dict) -> str:
    return block.get("region") or block.get("location") or ""


@st.composite
def zones(draw, source: str, region: str, exactly_one: bool = False) -> list[str]:
    if source == "GKE":
        pool = [f"{region}-{c}" for c in "abcf"]
    elif source == "EKS":
        pool = [region + c for c in "abcd"]
    elif source == "AKS":
        pool = ["1", "2", "3"]
    else:
        pool = ["zone-a", "zone-b"]
    if exactly_one:
        return [draw(st.sampled_from(pool))]
    return draw(st.lists(st.sampled_from(pool), max_size=3, unique=True))


@st.composite
def sizes(draw, source: str) -> dict:
    """nodeCount, minNodeCount and maxNodeCount as the rules allow (or leave to defaults)."""
    floor = 1 if source == "Vultr" else 0
    out: dict = {}
    if draw(st.booleans()):
        maximum = draw(st.integers(1, 10))
        out["maxNodeCount"] = maximum
        if draw(st.booleans()):
            out["minNodeCount"] = draw(st.integers(floor, maximum))
        if draw(st.booleans()):
            out["nodeCount"] = draw(st.integers(max(floor, 0), maximum))
    elif draw(st.booleans()):
        out["nodeCount"] = draw(st.integers(floor, 6))
    return out


@st.composite
def node_pool(draw, source: str, region: str, name: str, class_name: str) -> dict:
    pool: dict = {"name": name, "className": class_name, **draw(sizes(source))}
    fabric = draw(
        st.sampled_from(
            {
                "EKS": ["None", "EFA"],
                "Nebius": ["None", "InfiniBand"],
                "AKS": ["None", "InfiniBand"],
            }.get(source, ["None"])
        )
    )
    capacity_block = source == "EKS" and draw(st.booleans())
    if capacity_block:
        pool["capacityBlock"] = {
            "capacityReservationId": "cr-"
            + draw(st.text("0123456789abcdef", min_size=2, max_size=17))
        }
    chosen = draw(zones(source, region, exactly_one=capacity_block))
    if chosen:
        pool["zones"] = chosen
    if fabric != "None" or draw(st.booleans()):
        pool["fabric"] = {"type": fabric} if fabric != "None" or draw(st.booleans()) else {}
        if fabric == "InfiniBand" and source == "Nebius":
            pool["fabric"]["infiniband"] = {
                "fabric": draw(st.sampled_from(["fabric-2", "fabric-3"]))
            }
    return pool


def pool_name(source: str) -> st.SearchStrategy[str]:
    if source == "AKS":
        return st.from_regex(r"\A[a-z][a-z0-9]{0,11}\Z")
    return label_value(40)


@st.composite
def device(draw, name: str) -> dict:
    out: dict = {
        "name": name,
        "driver": draw(st.sampled_from(["gpu.nvidia.com", "dra.net", "ib.example.com"])),
    }
    if draw(st.booleans()):
        out["claim"] = "Synthetic"
    else:
        out["deviceClassName"] = draw(st.sampled_from(["gpu.nvidia.com", "efa.networking.k8s.aws"]))
    if draw(st.booleans()):
        out["count"] = draw(st.integers(1, 64))
    if draw(st.booleans()):
        out["attributes"] = {
            "architecture": {"string": draw(st.sampled_from(["Hopper", "Ada Lovelace"]))}
        }
    if draw(st.booleans()):
        out["capacity"] = {
            "memory": {"value": draw(st.sampled_from(["81559Mi", "140Gi", "23034Mi"]))}
        }
    return out


@st.composite
def provisioning(draw, source: str) -> dict | None:
    if source == "Existing":
        return None
    disk = {"diskSizeGb": draw(st.integers(10, 2048))} if draw(st.booleans()) else {}
    if source == "GKE":
        machine, accelerator, count = draw(st.sampled_from(GKE_SHAPES))
        block = {
            "machineType": machine,
            "accelerator": {"type": accelerator, "count": count},
            **disk,
        }
    elif source == "EKS":
        block = {"instanceType": draw(st.sampled_from(EKS_TYPES)), **disk}
    elif source == "AKS":
        block = {"vmSize": draw(st.sampled_from(AKS_SIZES)), **disk}
    elif source == "Nebius":
        platform, preset = draw(st.sampled_from(NEBIUS_SHAPES))
        block = {"platform": platform, "preset": preset, **disk}
    else:
        block = {"plan": draw(st.sampled_from(VULTR_PLANS))}
    if source != "GKE" and draw(st.booleans()):
        block["accelerator"] = {"type": "nvidia-h100", "count": draw(st.integers(1, 16))}
    return {"provider": source, source.lower(): block}


@st.composite
def inference_class(draw, name: str, source: str) -> dict:
    names = draw(st.lists(dns_label(12), min_size=1, max_size=3, unique=True))
    spec: dict = {"devices": [draw(device(n)) for n in names]}
    prov = draw(provisioning(source))
    if prov:
        spec["provisioning"] = prov
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


@st.composite
def placement(draw) -> dict:
    keys = st.one_of(
        dns_label(20), st.builds(lambda p, n: f"{p}.example.com/{n}", dns_label(10), dns_label(20))
    )
    labels = draw(st.dictionaries(keys, label_value(20) | st.just(""), max_size=4))
    return {"metadata": {"labels": labels}}


@st.composite
def taints(draw) -> list[dict]:
    pairs = draw(
        st.lists(
            st.tuples(dns_label(20), st.sampled_from(["NoSchedule", "NoExecute"])),
            max_size=3,
            unique=True,
        )
    )
    return [
        {"key": k, "effect": e, **({"value": "v"} if i % 2 else {})}
        for i, (k, e) in enumerate(pairs)
    ]


@st.composite
def clusters(draw, source: str | None = None) -> tuple[dict, list[dict]]:
    """An admitted InferenceCluster and InferenceClasses that fit it."""
    source = source or draw(st.sampled_from(SOURCES))
    block = draw(cluster_block(source))
    region = region_of(source, block)
    spec: dict = {"cluster": {"source": source, source.lower(): block}}
    if draw(st.booleans()):
        spec["stack"] = draw(st.sampled_from(["Standard", "Dynamo"]))
    if draw(st.booleans()):
        spec["placement"] = draw(placement())
    if draw(st.booleans()):
        spec["taints"] = draw(taints())
    classes: list[dict] = []
    if draw(st.integers(0, 9)) > 0:
        pool_names = draw(st.lists(pool_name(source), min_size=1, max_size=8, unique=True))
        class_names = [f"class-{i}" for i in range(draw(st.integers(1, len(pool_names))))]
        classes = [draw(inference_class(c, source)) for c in class_names]
        spec["nodePools"] = [
            draw(node_pool(source, region, n, class_names[i % len(class_names)]))
            for i, n in enumerate(pool_names)
        ]
    name = draw(dns_label(30))
    xr = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": spec,
    }
    return xr, classes
