"""InferenceCluster and InferenceClass reject what they should, with messages that name the field.

Every invalid resource is built as a dict from a valid base. All of them, and a set of valid edge
cases, go into ONE multi-document file, and the real `crossplane beta validate` checks the whole
table in one call: schema defaults, OpenAPI validation, unknown fields and the CEL
x-kubernetes-validations, as the API server would. Each case then asserts on its own resource's
output lines: it failed, the expected message is there, and nothing else failed (so each case
proves one rule, not a side effect of a broken base).

Transition (immutability) rules need an old object, which validate has not; they are tested in
tests/test_api_transitions.py. The CEL cost budget the API server enforces when it creates the
CRDs is checked at the bottom of this file with tests/tools/celcost, built with Go.
"""

import copy
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import APIS, CROSSPLANE_IMAGE, ROOT
from tests.xrds import XRDS, cel_rules

API_VERSION = "modelplane.ai/v1alpha1"

DROP = object()  # a value that removes its key from the base


def merged(base: dict, changes: dict) -> dict:
    """A deep copy of base with changes merged in.

    Dicts merge recursively, DROP deletes a key, any other value replaces.
    """
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is DROP:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --- A valid InferenceCluster per source, and helpers that change one thing about it. ------------

BLOCKS = {
    "GKE": ("gke", {"region": "us-central1"}),
    "EKS": ("eks", {"region": "us-west-2"}),
    "AKS": ("aks", {"location": "westeurope"}),
    "Nebius": ("nebius", {}),
    "Vultr": ("vultr", {"region": "ewr"}),
    "Existing": ("existing", {"secretRef": {"name": "west-kubeconfig"}}),
}


def pool(**changes) -> dict:
    """A valid node pool (its name is also a valid AKS agent pool name), with changes."""
    return merged({"name": "gpupool", "className": "h100-8x", "nodeCount": 2}, changes)


def cluster(
    source: str = "GKE", *, cluster: dict | None = None, pools: list | None = None, **spec
) -> dict:
    """A valid InferenceCluster on source (its block, one pool), changed by cluster/pools/spec."""
    block, settings = BLOCKS[source]
    base = {"cluster": {"source": source, block: settings}, "nodePools": [pool()]}
    changes = {"cluster": cluster or {}, **spec}
    if pools is not None:
        changes["nodePools"] = pools
    return {"kind": "InferenceCluster", "spec": merged(base, changes)}


def labels(values: dict) -> dict:
    return {"placement": {"metadata": {"labels": values}}}


# --- A valid InferenceClass, and helpers. ---------------------------------------------------------

PROVISIONING = {
    "GKE": {
        "gke": {
            "machineType": "a3-highgpu-8g",
            "accelerator": {"type": "nvidia-h100-80gb", "count": 8},
        }
    },
    "EKS": {"eks": {"instanceType": "p5en.48xlarge"}},
    "AKS": {"aks": {"vmSize": "Standard_ND96isr_H100_v5"}},
    "Nebius": {"nebius": {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}},
    "Vultr": {"vultr": {"plan": "vcg-l40s-16c-180g-48vram"}},
}


def device(**changes) -> dict:
    base = {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "deviceClassName": "gpu.nvidia.com",
        "count": 8,
        "attributes": {
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
        },
        "capacity": {"memory": {"value": "81559Mi"}},
    }
    return merged(base, changes)


def inference_class(provider: str | None = "GKE", *, devices: list | None = None, **spec) -> dict:
    """A valid InferenceClass provisioned on provider (None: not provisioned), changed by spec."""
    base: dict = {"devices": [device()]}
    if provider:
        base["provisioning"] = {"provider": provider, **PROVISIONING[provider]}
    if devices is not None:
        spec["devices"] = devices
    return {"kind": "InferenceClass", "spec": merged(base, spec)}


# --- The table. -----------------------------------------------------------------------------------


@dataclass
class Case:
    id: str  # also the resource's metadata.name, so it must be a DNS subdomain
    resource: dict
    expect: str = ""  # a substring of one of the resource's error lines; empty for a valid case
    also: tuple[str, ...] = field(
        default=()
    )  # other error substrings this case may produce alongside


def bad(id: str, resource: dict, expect: str, *also: str):
    return pytest.param(Case(id, resource, expect, also), id=id)


def ok(id: str, resource: dict):
    return pytest.param(Case(id, resource), id=id)


LONG = "a" * 41  # a DNS label one character over the pool name limit
PREFIX_253 = ".".join(
    ["p" * 63] * 3 + ["p" * 61]
)  # a DNS subdomain of the longest label-prefix length
SOURCES = list(BLOCKS)

INVALID_CLUSTERS = [
    # Each source requires its block ...
    *[
        bad(
            f"{s.lower()}-without-its-block",
            cluster(s, cluster={BLOCKS[s][0]: DROP}),
            f"spec.cluster.{BLOCKS[s][0]} is required when spec.cluster.source is {s}",
        )
        for s in SOURCES
    ],
    # ... and allows no other source's block (each block next to a source it does not belong to).
    *[
        bad(
            f"{BLOCKS[other][0]}-block-on-{s.lower()}",
            cluster(s, cluster={BLOCKS[other][0]: BLOCKS[other][1]}),
            f"spec.cluster.{BLOCKS[other][0]} is allowed only when spec.cluster.source is {other}",
        )
        for s, other in zip(SOURCES, SOURCES[1:] + SOURCES[:1], strict=True)
    ],
    bad(
        "unknown-source",
        cluster(cluster={"source": "OpenShift", "gke": DROP}),
        'spec.cluster.source: Unsupported value: "OpenShift"',
    ),
    bad(
        "missing-cluster",
        {"kind": "InferenceCluster", "spec": {"nodePools": [pool()]}},
        "spec.cluster: Required value",
    ),
    # validate still runs the CEL rules, which cannot read the missing source; the API server
    # skips them after a Required error ("some validation rules were not checked").
    bad(
        "missing-source",
        cluster(cluster={"source": DROP}),
        "spec.cluster.source: Required value",
        "no such key: source",
    ),
    bad(
        "gke-without-region",
        cluster("GKE", cluster={"gke": {"region": DROP}}),
        "spec.cluster.gke.region: Required value",
    ),
    bad(
        "eks-region-too-long",
        cluster("EKS", cluster={"eks": {"region": "r" * 33}}),
        "spec.cluster.eks.region: Too long: may not be more than 32 bytes",
    ),
    *(
        bad(
            f"eks-region-of-{partition}",
            cluster("EKS", cluster={"eks": {"region": region}}),
            "spec.cluster.eks.region must be a region of the aws partition: AWS China (cn-), "
            "GovCloud (us-gov-), the European Sovereign Cloud (eusc-) and the ISO regions need IAM "
            "policy ARNs and service names the function does not compose",
        )
        for partition, region in (
            ("aws-cn", "cn-north-1"),
            ("aws-us-gov", "us-gov-west-1"),
            ("aws-eusc", "eusc-de-east-1"),
            ("aws-iso-b", "us-isob-east-1"),
            ("aws-iso-e", "eu-isoe-west-1"),
        )
    ),
    bad(
        "aks-empty-location",
        cluster("AKS", cluster={"aks": {"location": ""}}),
        'spec.cluster.aks.location: Invalid value: "": spec.cluster.aks.location in body should'
        " be at least 1 chars long",
    ),
    bad(
        "credentials-type-enum",
        cluster("Vultr", cluster={"vultr": {"credentials": {"type": "Secret"}}}),
        'spec.cluster.vultr.credentials.type: Unsupported value: "Secret"',
    ),
    bad(
        "existing-without-secret-ref",
        cluster("Existing", cluster={"existing": {"secretRef": DROP}}),
        "spec.cluster.existing.secretRef: Required value",
    ),
    bad(
        "identity-type-enum",
        cluster(
            "Existing",
            cluster={
                "existing": {"identitySecretRef": {"name": "gcp", "type": "AzureWorkloadIdentity"}}
            },
        ),
        'spec.cluster.existing.identitySecretRef.type: Unsupported value: "AzureWorkloadIdentity"',
    ),
    bad(
        "unknown-field-in-gke",
        cluster("GKE", cluster={"gke": {"zone": "us-central1-a"}}),
        'spec.cluster.gke.zone: Invalid value: "zone": unknown field: "zone"',
    ),
    bad(
        "unknown-field-in-spec",
        cluster(replicas=3),
        'spec.replicas: Invalid value: "replicas": unknown field: "replicas"',
    ),
    # fabric.infiniband: required for InfiniBand on Nebius, allowed only with type InfiniBand.
    bad(
        "nebius-infiniband-without-block",
        cluster("Nebius", pools=[pool(fabric={"type": "InfiniBand"})]),
        "spec.nodePools[].fabric.infiniband is required when fabric.type is InfiniBand and"
        " spec.cluster.source is Nebius",
    ),
    bad(
        "infiniband-block-with-type-none",
        cluster(
            "Nebius", pools=[pool(fabric={"type": "None", "infiniband": {"fabric": "fabric-2"}})]
        ),
        "spec.nodePools[].fabric.infiniband is allowed only when fabric.type is InfiniBand",
    ),
    bad(
        "infiniband-block-with-default-type",
        cluster("Nebius", pools=[pool(fabric={"infiniband": {"fabric": "fabric-2"}})]),
        "spec.nodePools[].fabric.infiniband is allowed only when fabric.type is InfiniBand",
    ),
    bad(
        "infiniband-without-fabric-name",
        cluster("Nebius", pools=[pool(fabric={"type": "InfiniBand", "infiniband": {}})]),
        "spec.nodePools[0].fabric.infiniband.fabric: Required value",
    ),
    bad(
        "infiniband-fabric-name-too-long",
        cluster(
            "Nebius",
            pools=[pool(fabric={"type": "InfiniBand", "infiniband": {"fabric": "f" * 64}})],
        ),
        "spec.nodePools[0].fabric.infiniband.fabric: Too long: may not be more than 63 bytes",
    ),
    bad(
        "fabric-type-enum",
        cluster("EKS", pools=[pool(fabric={"type": "RoCE"})]),
        'spec.nodePools[0].fabric.type: Unsupported value: "RoCE"',
    ),
    # capacityBlock and EFA only on EKS; InfiniBand only on Nebius and AKS.
    bad(
        "capacity-block-on-gke",
        cluster(
            "GKE",
            pools=[
                pool(
                    zones=["us-central1-a"],
                    capacityBlock={"capacityReservationId": "cr-0123456789abcdef0"},
                )
            ],
        ),
        "spec.nodePools[].capacityBlock is allowed only when spec.cluster.source is EKS",
    ),
    bad(
        "efa-on-aks",
        cluster("AKS", pools=[pool(fabric={"type": "EFA"})]),
        "spec.nodePools[].fabric.type EFA is allowed only when spec.cluster.source is EKS",
    ),
    bad(
        "infiniband-on-eks",
        cluster("EKS", pools=[pool(fabric={"type": "InfiniBand"})]),
        "spec.nodePools[].fabric.type InfiniBand is allowed only when spec.cluster.source is"
        " Nebius or AKS",
    ),
    bad(
        "infiniband-on-gke-second-pool",
        cluster("GKE", pools=[pool(), pool(name="ib", fabric={"type": "InfiniBand"})]),
        "spec.nodePools[].fabric.type InfiniBand is allowed only when spec.cluster.source is"
        " Nebius or AKS",
    ),
    bad(
        "capacity-reservation-id-pattern",
        cluster(
            "EKS",
            pools=[pool(zones=["us-west-2a"], capacityBlock={"capacityReservationId": "cr-XYZ"})],
        ),
        "spec.nodePools[0].capacityBlock.capacityReservationId in body should match"
        " '^cr-[0-9a-f]+$'",
    ),
    bad(
        "capacity-reservation-id-too-long",
        cluster(
            "EKS",
            pools=[
                pool(
                    zones=["us-west-2a"], capacityBlock={"capacityReservationId": "cr-" + "0" * 62}
                )
            ],
        ),
        "spec.nodePools[0].capacityBlock.capacityReservationId: Too long: may not be more than 64"
        " bytes",
    ),
    bad(
        "capacity-block-without-id",
        cluster("EKS", pools=[pool(zones=["us-west-2a"], capacityBlock={})]),
        "spec.nodePools[0].capacityBlock.capacityReservationId: Required value",
    ),
    # Pool names: a label value of at most 40 characters; on AKS ^[a-z][a-z0-9]{0,11}$.
    *[
        bad(
            f"pool-name-{why}",
            cluster(pools=[pool(name=name)]),
            "spec.nodePools[0].name in body should match"
            " '^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'",
        )
        for why, name in (
            ("with-space", "gpu pool"),
            ("with-bang", "gpu!"),
            ("leading-dash", "-gpu"),
            ("trailing-dot", "gpu."),
            ("empty", ""),
        )
    ],
    bad(
        "pool-name-too-long",
        cluster(pools=[pool(name=LONG)]),
        "spec.nodePools[0].name: Too long: may not be more than 40 bytes",
    ),
    bad(
        "aks-pool-name-with-dash",
        cluster("AKS", pools=[pool(name="gpu-a100")]),
        "spec.nodePools[].name must match ^[a-z][a-z0-9]{0,11}$ (AKS agent pool names) when"
        " spec.cluster.source is AKS",
    ),
    bad(
        "aks-pool-name-13-chars",
        cluster("AKS", pools=[pool(name="gpua100abcdef")]),
        "spec.nodePools[].name must match ^[a-z][a-z0-9]{0,11}$ (AKS agent pool names) when"
        " spec.cluster.source is AKS",
    ),
    bad(
        "aks-pool-name-leading-digit",
        cluster("AKS", pools=[pool(name="1gpu")]),
        "spec.nodePools[].name must match ^[a-z][a-z0-9]{0,11}$ (AKS agent pool names) when"
        " spec.cluster.source is AKS",
    ),
    bad(
        "pool-without-class",
        cluster(pools=[pool(className=DROP)]),
        "spec.nodePools[0].className: Required value",
    ),
    # Counts: nodeCount <= maxNodeCount and minNodeCount <= maxNodeCount where set; minNodeCount
    # only with maxNodeCount; Vultr nodeCount >= 1.
    bad(
        "node-count-over-max",
        cluster(pools=[pool(nodeCount=6, minNodeCount=1, maxNodeCount=5)]),
        "spec.nodePools[].nodeCount must not exceed maxNodeCount",
    ),
    bad(
        "min-over-max",
        cluster(pools=[pool(nodeCount=DROP, minNodeCount=3, maxNodeCount=2)]),
        "spec.nodePools[].minNodeCount must not exceed maxNodeCount",
    ),
    bad(
        "min-without-max",
        cluster(pools=[pool(nodeCount=DROP, minNodeCount=2)]),
        "spec.nodePools[].minNodeCount requires maxNodeCount (a pool autoscales between the two)",
    ),
    # Zones: each once, in the cluster's region (GKE, EKS) or 1-3 (AKS).
    bad(
        "duplicate-zones",
        cluster(pools=[pool(zones=["us-central1-a", "us-central1-a"])]),
        "spec.nodePools[].zones must not repeat a zone",
    ),
    bad(
        "gke-zone-of-another-region",
        cluster("GKE", pools=[pool(zones=["us-central1-a", "europe-west4-a"])]),
        "spec.nodePools[].zones must be zones of spec.cluster.gke.region, the region followed by"
        " -<letter> (e.g. us-central1-a)",
    ),
    bad(
        "gke-zone-is-the-region",
        cluster("GKE", pools=[pool(zones=["us-central1"])]),
        "spec.nodePools[].zones must be zones of spec.cluster.gke.region, the region followed by"
        " -<letter> (e.g. us-central1-a)",
    ),
    bad(
        "eks-zone-of-another-region",
        cluster("EKS", pools=[pool(zones=["us-east-1a"])]),
        "spec.nodePools[].zones must be Availability Zones of spec.cluster.eks.region, the region"
        " followed by a letter a to l (e.g. us-west-2a)",
    ),
    bad(
        "eks-zone-letter-out-of-range",
        cluster("EKS", pools=[pool(zones=["us-west-2z"])]),
        "spec.nodePools[].zones must be Availability Zones of spec.cluster.eks.region, the region"
        " followed by a letter a to l (e.g. us-west-2a)",
    ),
    bad(
        "eks-local-zone",
        cluster("EKS", pools=[pool(zones=["us-west-2-lax-1a"])]),
        "spec.nodePools[].zones must be Availability Zones of spec.cluster.eks.region, the region"
        " followed by a letter a to l (e.g. us-west-2a)",
    ),
    bad(
        "aks-zone-4",
        cluster("AKS", pools=[pool(zones=["1", "4"])]),
        "spec.nodePools[].zones must be Azure availability zones 1, 2 or 3 when"
        " spec.cluster.source is AKS",
    ),
    bad(
        "seventeen-zones",
        cluster("Existing", pools=[pool(zones=[f"zone-{i}" for i in range(17)])]),
        "spec.nodePools[0].zones: Too many: 17: must have at most 16 items",
    ),
    bad(
        "capacity-block-without-zone",
        cluster("EKS", pools=[pool(capacityBlock={"capacityReservationId": "cr-0a"})]),
        "spec.nodePools[].capacityBlock needs exactly one zone in zones: a Capacity Block lives in"
        " one Availability Zone",
    ),
    bad(
        "capacity-block-in-two-zones",
        cluster(
            "EKS",
            pools=[
                pool(
                    zones=["us-west-2a", "us-west-2b"],
                    capacityBlock={"capacityReservationId": "cr-0a"},
                )
            ],
        ),
        "spec.nodePools[].capacityBlock needs exactly one zone in zones: a Capacity Block lives in"
        " one Availability Zone",
    ),
    bad(
        "vultr-bare-version",
        cluster("Vultr", cluster={"vultr": {"kubernetesVersion": "1.36"}}),
        "spec.cluster.vultr.kubernetesVersion must be an exact VKE version with its build"
        " suffix, like v1.36.1+3 (vultr-cli kubernetes versions lists them)",
    ),
    bad(
        "vultr-version-without-build",
        cluster("Vultr", cluster={"vultr": {"kubernetesVersion": "v1.36.1"}}),
        "spec.cluster.vultr.kubernetesVersion must be an exact VKE version with its build"
        " suffix, like v1.36.1+3 (vultr-cli kubernetes versions lists them)",
    ),
    bad(
        "vultr-zero-nodes",
        cluster("Vultr", pools=[pool(nodeCount=0)]),
        "spec.nodePools[].nodeCount must be at least 1 when spec.cluster.source is Vultr (VKE"
        " pools always have a node)",
    ),
    bad(
        "negative-node-count",
        cluster(pools=[pool(nodeCount=-1)]),
        "spec.nodePools[0].nodeCount in body should be greater than or equal to 0",
    ),
    bad(
        "zero-max-node-count",
        cluster(pools=[pool(nodeCount=0, maxNodeCount=0)]),
        "spec.nodePools[0].maxNodeCount in body should be greater than or equal to 1",
    ),
    bad(
        "string-node-count",
        cluster(pools=[pool(nodeCount="2")]),
        "spec.nodePools[0].nodeCount in body must be of type integer",
        "invalid data, expected int, got string",
    ),
    bad(
        "zones-not-a-list",
        cluster(pools=[pool(zones="us-central1-a")]),
        "spec.nodePools[0].zones in body must be of type array",
        # validate still evaluates the zone rules on the wrong type; the API server would not.
        "expected an array for the provided schema",
    ),
    bad(
        "nine-pools",
        cluster(pools=[pool(name=f"pool{i}") for i in range(9)]),
        "spec.nodePools: Too many: 9: must have at most 8 items",
    ),
    bad("no-pools", cluster(pools=[]), "spec.nodePools in body should have at least 1 items"),
    bad(
        "unknown-field-in-pool",
        cluster(pools=[pool(gpus=8)]),
        'spec.nodePools[0].gpus: Invalid value: "gpus": unknown field: "gpus"',
    ),
    # Placement labels: valid Kubernetes label keys and values.
    bad(
        "label-key-leading-dash",
        cluster(**labels({"-region": "eu"})),
        "spec.placement.metadata.labels keys must be valid Kubernetes label keys ([prefix/]name)",
    ),
    bad(
        "label-key-uppercase-prefix",
        cluster(**labels({"Example.com/region": "eu"})),
        "spec.placement.metadata.labels keys must be valid Kubernetes label keys ([prefix/]name)",
    ),
    bad(
        "label-key-two-slashes",
        cluster(**labels({"example.com/a/b": "eu"})),
        "spec.placement.metadata.labels keys must be valid Kubernetes label keys ([prefix/]name)",
    ),
    bad(
        "label-key-name-too-long",
        cluster(**labels({"k" * 64: "eu"})),
        "spec.placement.metadata.labels key names must be at most 63 characters",
    ),
    bad(
        "label-key-prefixed-name-too-long",
        cluster(**labels({"example.com/" + "k" * 64: "eu"})),
        "spec.placement.metadata.labels keys need a prefix of at most 253 and a name of at most"
        " 63 characters",
    ),
    bad(
        "label-key-prefix-too-long",
        cluster(**labels({"q" + PREFIX_253 + "/region": "eu"})),
        "spec.placement.metadata.labels keys need a prefix of at most 253 and a name of at most"
        " 63 characters",
    ),
    bad(
        "label-key-reserved-prefix",
        cluster(**labels({"modelplane.ai/region": "eu"})),
        "spec.placement.metadata.labels keys must not use the reserved modelplane.ai/ prefix",
    ),
    bad(
        "label-value-pattern",
        cluster(**labels({"region": "-eu"})),
        "spec.placement.metadata.labels.region in body should match",
    ),
    bad(
        "label-value-too-long",
        cluster(**labels({"region": "e" * 64})),
        "spec.placement.metadata.labels.region: Too long: may not be more than 63 bytes",
    ),
    bad(
        "label-value-not-a-string",
        cluster(**labels({"tier": 1})),
        "spec.placement.metadata.labels.tier in body must be of type string",
    ),
    bad(
        "seventeen-labels",
        cluster(**labels({f"l{i}": "v" for i in range(17)})),
        "spec.placement.metadata.labels: Too many: 17: must have at most 16 items",
    ),
    # Stack and taints.
    bad("stack-enum", cluster(stack="Triton"), 'spec.stack: Unsupported value: "Triton"'),
    bad(
        "taint-effect-enum",
        cluster(taints=[{"key": "maintenance", "effect": "PreferNoSchedule"}]),
        'spec.taints[0].effect: Unsupported value: "PreferNoSchedule"',
    ),
    bad(
        "duplicate-taint",
        cluster(
            taints=[
                {"key": "maintenance", "effect": "NoSchedule"},
                {"key": "maintenance", "value": "again", "effect": "NoSchedule"},
            ]
        ),
        "spec.taints must not repeat a key and effect",
    ),
    bad(
        "taint-without-key",
        cluster(taints=[{"effect": "NoSchedule"}]),
        "spec.taints[0].key: Required value",
        "no such key: key evaluating rule: spec.taints must not repeat a key and effect",
    ),
]

INVALID_CLASSES = [
    bad(
        "dra-without-device-class",
        inference_class(devices=[device(claim="DRA", deviceClassName=DROP)]),
        "spec.devices[].deviceClassName is required when claim is DRA",
    ),
    # claim defaults to DRA: the rule reads the default, so this is the same rejection (not a
    # missing-key error).
    bad(
        "default-claim-without-device-class",
        inference_class(devices=[device(deviceClassName=DROP)]),
        "spec.devices[].deviceClassName is required when claim is DRA",
    ),
    bad(
        "attribute-with-two-values",
        inference_class(devices=[device(attributes={"arch": {"string": "Hopper", "int": 9}})]),
        "spec.devices[].attributes values must set exactly one of string, version, bool or int",
    ),
    bad(
        "attribute-with-no-value",
        inference_class(devices=[device(attributes={"arch": {}})]),
        "spec.devices[].attributes values must set exactly one of string, version, bool or int",
    ),
    bad(
        "attribute-bad-version",
        inference_class(devices=[device(attributes={"cuda": {"version": "9.0"}})]),
        "spec.devices[0].attributes.cuda.version in body should match",
    ),
    bad(
        "attribute-int-not-integer",
        inference_class(devices=[device(attributes={"cores": {"int": "many"}})]),
        "spec.devices[0].attributes.cores.int in body must be of type integer",
        "invalid data, expected int, got string",
    ),
    bad(
        "capacity-bad-quantity",
        inference_class(devices=[device(capacity={"memory": {"value": "80 GiB"}})]),
        "spec.devices[0].capacity.memory.value in body should match",
    ),
    bad(
        "capacity-without-value",
        inference_class(devices=[device(capacity={"memory": {"value": DROP}})]),
        "spec.devices[0].capacity.memory.value: Required value",
    ),
    bad(
        "device-count-zero",
        inference_class(devices=[device(count=0)]),
        "spec.devices[0].count in body should be greater than or equal to 1",
    ),
    bad(
        "device-count-65",
        inference_class(devices=[device(count=65)]),
        "spec.devices[0].count in body should be less than or equal to 64",
    ),
    bad(
        "device-name-not-dns-label",
        inference_class(devices=[device(name="GPU")]),
        "spec.devices[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    ),
    bad(
        "device-driver-pattern",
        inference_class(devices=[device(driver="gpu_nvidia")]),
        "spec.devices[0].driver in body should match",
    ),
    bad(
        "device-without-driver",
        inference_class(devices=[device(driver=DROP)]),
        "spec.devices[0].driver: Required value",
    ),
    bad("no-devices", {"kind": "InferenceClass", "spec": {}}, "spec.devices: Required value"),
    bad(
        "seventeen-devices",
        inference_class(devices=[device(name=f"d{i}") for i in range(17)]),
        "spec.devices: Too many: 17: must have at most 16 items",
    ),
    bad(
        "unknown-field-in-device",
        inference_class(devices=[device(vendor="nvidia")]),
        'spec.devices[0].vendor: Invalid value: "vendor": unknown field: "vendor"',
    ),
    # Each provider requires its block; a second block is rejected.
    *[
        bad(
            f"{p.lower()}-provisioning-without-block",
            inference_class(p, provisioning={next(iter(PROVISIONING[p])): DROP}),
            f"spec.provisioning.{p.lower()} is required when provider is {p}",
        )
        for p in PROVISIONING
    ],
    bad(
        "provisioning-with-second-block",
        inference_class("GKE", provisioning=PROVISIONING["EKS"]),
        "spec.provisioning takes the block of its provider only",
    ),
    bad(
        "provisioning-with-wrong-block",
        inference_class("Nebius", provisioning={"nebius": DROP, **PROVISIONING["Vultr"]}),
        "spec.provisioning.nebius is required when provider is Nebius",
    ),
    bad(
        "provider-enum",
        inference_class("GKE", provisioning={"provider": "OCI"}),
        'spec.provisioning.provider: Unsupported value: "OCI"',
    ),
    bad(
        "accelerator-count-17",
        inference_class("GKE", provisioning={"gke": {"accelerator": {"count": 17}}}),
        "spec.provisioning.gke.accelerator.count in body should be less than or equal to 16",
    ),
    bad(
        "accelerator-type-pattern",
        inference_class("EKS", provisioning={"eks": {"accelerator": {"type": "nvidia h100"}}}),
        "spec.provisioning.eks.accelerator.type in body should match",
    ),
    bad(
        "disk-too-small",
        inference_class("AKS", provisioning={"aks": {"diskSizeGb": 5}}),
        "spec.provisioning.aks.diskSizeGb in body should be greater than or equal to 10",
    ),
    bad(
        "nebius-without-preset",
        inference_class("Nebius", provisioning={"nebius": {"preset": DROP}}),
        "spec.provisioning.nebius.preset: Required value",
    ),
    bad(
        "unknown-field-in-vultr",
        inference_class("Vultr", provisioning={"vultr": {"diskSizeGb": 200}}),
        'spec.provisioning.vultr.diskSizeGb: Invalid value: "diskSizeGb": unknown field:'
        ' "diskSizeGb"',
    ),
]

VALID = [
    *[ok(f"ok-{s.lower()}", cluster(s)) for s in SOURCES],
    ok("ok-nebius-empty-block", cluster("Nebius", cluster={"nebius": {}})),
    ok(
        "ok-nebius-infiniband",
        cluster(
            "Nebius",
            pools=[pool(fabric={"type": "InfiniBand", "infiniband": {"fabric": "fabric-2"}})],
        ),
    ),
    # fabric.type defaults to None; the Nebius InfiniBand rule reads it, so this passes only if
    # the default applies (else: "no such key: type").
    ok("ok-nebius-empty-fabric", cluster("Nebius", pools=[pool(fabric={})])),
    ok(
        "ok-aks-infiniband-no-block",
        cluster("AKS", pools=[pool(name="gpua100", fabric={"type": "InfiniBand"})]),
    ),
    ok("ok-aks-pool-name-12-chars", cluster("AKS", pools=[pool(name="gpua100abcde")])),
    ok(
        "ok-eks-capacity-block-efa",
        cluster(
            "EKS",
            pools=[
                pool(
                    name="p5en",
                    zones=["us-west-2a"],
                    fabric={"type": "EFA"},
                    capacityBlock={"capacityReservationId": "cr-0123456789abcdef0"},
                )
            ],
        ),
    ),
    ok(
        "ok-autoscaling-from-zero",
        cluster(pools=[pool(minNodeCount=0, nodeCount=0, maxNodeCount=1)]),
    ),
    ok("ok-counts-equal", cluster(pools=[pool(minNodeCount=3, nodeCount=3, maxNodeCount=3)])),
    ok("ok-vultr-one-node", cluster("Vultr", pools=[pool(nodeCount=1)])),
    ok("ok-vultr-default-node-count", cluster("Vultr", pools=[pool(nodeCount=DROP)])),
    ok("ok-pool-name-40-chars", cluster(pools=[pool(name="h100-" + "a" * 35)])),
    ok("ok-pool-name-label-value", cluster(pools=[pool(name="H100_Pool"), pool(name="l4.small")])),
    ok("ok-pool-name-one-char", cluster(pools=[pool(name="a")])),
    # nodeCount defaults to 1, which admission cannot tell from unset: a range alone is admitted.
    ok("ok-range-only", cluster(pools=[pool(nodeCount=DROP, minNodeCount=2, maxNodeCount=10)])),
    ok(
        "ok-min-over-node-count", cluster(pools=[pool(nodeCount=2, minNodeCount=3, maxNodeCount=5)])
    ),
    ok("ok-max-only", cluster(pools=[pool(maxNodeCount=10)])),
    ok(
        "ok-zones",
        cluster("GKE", pools=[pool(zones=["us-central1-a", "us-central1-f"])]),
    ),
    ok("ok-eks-zones", cluster("EKS", pools=[pool(zones=["us-west-2a", "us-west-2d"])])),
    ok("ok-aks-zones", cluster("AKS", pools=[pool(zones=["1", "2", "3"])])),
    ok(
        "ok-vultr-version",
        cluster("Vultr", cluster={"vultr": {"kubernetesVersion": "v1.35.4+12"}}),
    ),
    ok("ok-eight-pools", cluster(pools=[pool(name=f"pool{i}") for i in range(8)])),
    ok(
        "ok-labels",
        cluster(
            **labels(
                {
                    "region": "eu",
                    "example.com/region": "eu-west",
                    "team.example.com/Cost_Center.1": "A-1_b.2",
                    "empty": "",
                    "k" * 63: "v" * 63,
                    PREFIX_253
                    + "/"
                    + "n"
                    * 63: "x",  # the longest key: a 253-character prefix and a 63-character name
                }
            )
        ),
    ),
    ok(
        "ok-dynamo-with-taints",
        cluster(
            stack="Dynamo",
            taints=[
                {"key": "maintenance", "effect": "NoSchedule"},
                {"key": "maintenance", "value": "drain", "effect": "NoExecute"},
            ],
        ),
    ),
    ok(
        "ok-existing-identity",
        cluster(
            "Existing",
            cluster={
                "existing": {
                    "secretRef": {"name": "kc", "key": "config"},
                    "identitySecretRef": {
                        "name": "nebius-sa",
                        "type": "NebiusServiceAccountCredentials",
                    },
                    "cache": {"storageClassName": "filestore-rwx"},
                }
            },
        ),
    ),
    ok(
        "ok-credentials",
        cluster(
            "GKE", cluster={"gke": {"credentials": {"name": "team-a", "type": "ProviderConfig"}}}
        ),
    ),
    *[ok(f"ok-class-{p.lower()}", inference_class(p)) for p in PROVISIONING],
    ok("ok-class-no-provisioning", inference_class(None)),
    ok(
        "ok-class-synthetic-device",
        inference_class(
            devices=[device(), {"name": "ib", "claim": "Synthetic", "driver": "ib.example.com"}]
        ),
    ),
    ok(
        "ok-class-attributes",
        inference_class(
            devices=[
                device(
                    attributes={
                        "a": {"string": "x"},
                        "b": {"version": "v1.2.3-rc.1"},
                        "c": {"bool": False},
                        "d": {"int": 0},
                    }
                )
            ]
        ),
    ),
    ok(
        "ok-class-quantities",
        inference_class(
            devices=[
                device(
                    capacity={
                        "a": {"value": "81559Mi"},
                        "b": {"value": "1.5"},
                        "c": {"value": "100m"},
                        "d": {"value": "1e3"},
                        "e": {"value": "+.5G"},
                    }
                )
            ]
        ),
    ),
]

CASES = [p.values[0] for p in INVALID_CLUSTERS + INVALID_CLASSES + VALID]


# --- One validate call for the whole table. -------------------------------------------------------

LINE = re.compile(
    r"^\[(?P<mark>[^\]]+)\] (?P<head>.*?)modelplane\.ai/v1alpha1, Kind=(?P<kind>\w+), "
    r"(?P<name>\S+)(?P<rest>.*)$"
)


@dataclass
class Result:
    passed: bool = False
    errors: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def validated(crossplane, validate_cache, tmp_path_factory) -> dict[str, Result]:
    names = [c.id for c in CASES]
    assert len(names) == len(set(names)), "case ids (and so resource names) must be unique"
    docs = [
        {
            "apiVersion": API_VERSION,
            "kind": c.resource["kind"],
            "metadata": {"name": c.id},
            "spec": c.resource["spec"],
        }
        for c in CASES
    ]
    table = tmp_path_factory.mktemp("api-table") / "table.yaml"
    # JSON documents (JSON is YAML): PyYAML writes strings like 1e3 or y unquoted, and Go's YAML
    # reads those as a number and a bool.
    table.write_text("\n---\n".join(json.dumps(d, indent=1) for d in docs) + "\n")

    proc = subprocess.run(
        [
            crossplane,
            "beta",
            "validate",
            "--cache-dir",
            str(validate_cache),
            "--crossplane-image",
            CROSSPLANE_IMAGE,
            "--error-on-missing-schemas",
            str(APIS),
            str(table),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,  # validate exits 1 whenever a resource fails, which the table makes certain
    )
    out = proc.stdout
    assert proc.returncode != 0, (
        f"validate accepted a table full of invalid resources:\n{out}\n{proc.stderr}"
    )
    assert f"Total {len(CASES)} resources: 0 missing schemas" in out, f"{out}\n{proc.stderr}"

    results: dict[str, Result] = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        result = results.setdefault(m["name"], Result())
        if m["mark"] == "✓" and m["rest"].strip() == "validated successfully":
            result.passed = True
        else:
            result.errors.append(line)
    assert set(results) == set(names), (
        f"validate reported on {sorted(set(results) ^ set(names))} unexpectedly:\n{out}"
    )
    return results


@pytest.mark.parametrize(
    "case",
    [p.values[0] for p in INVALID_CLUSTERS + INVALID_CLASSES],
    ids=[p.id for p in INVALID_CLUSTERS + INVALID_CLASSES],
)
def test_invalid_resource_is_rejected_with_its_message(validated, case: Case):
    result = validated[case.id]
    shown = "\n".join(result.errors)
    assert not result.passed and result.errors, f"{case.id} was accepted"
    hits = [line for line in result.errors if case.expect in line]
    assert hits, f"{case.id}: expected {case.expect!r} in:\n{shown}"
    # The rule itself said no: a CEL rule that errors out (a missing key, a wrong type) also
    # prints its message.
    if "CEL validation error" in hits[0] and not case.also:
        assert "evaluating rule" not in hits[0], (
            f"{case.id}: the rule failed to evaluate instead of rejecting:\n{shown}"
        )
    # Only the rule under test (and what the case declares) fired: the valid base hid no second
    # failure.
    stray = [
        line
        for line in result.errors
        if case.expect not in line and not any(a in line for a in case.also)
    ]
    assert not stray, f"{case.id}: unexpected errors besides {case.expect!r}:\n" + "\n".join(stray)


@pytest.mark.parametrize("case", [p.values[0] for p in VALID], ids=[p.id for p in VALID])
def test_valid_resource_is_accepted(validated, case: Case):
    result = validated[case.id]
    assert result.passed and not result.errors, f"{case.id} was rejected:\n" + "\n".join(
        result.errors
    )


@pytest.mark.parametrize("kind", XRDS)
def test_every_cel_rule_has_a_rejecting_case(kind):
    """One case per rule: every non-transition rule's message is expected by an invalid case."""
    expected = {
        c.expect
        for c in (p.values[0] for p in INVALID_CLUSTERS + INVALID_CLASSES)
        if c.resource["kind"] == kind
    }
    rules = [(path, r) for path, r in cel_rules(kind) if "oldSelf" not in r["rule"]]
    assert rules, f"no CEL rules found in {XRDS[kind]}"
    untested = [
        f"{path}: {r['message']}"
        for path, r in rules
        if not any(r["message"] in e for e in expected)
    ]
    assert not untested, "rules with no invalid case:\n" + "\n".join(untested)


@pytest.mark.parametrize("kind", XRDS)
def test_every_cel_message_names_its_field(kind):
    """A rule's message starts with the path of the field it sits on (or one under it)."""
    for path, r in cel_rules(kind):
        assert r["message"].startswith(path.removesuffix(".*")), (
            f"{path}: {r['message']!r} does not name its field"
        )


# --- The CEL cost budget, as the API server checks it when the CRDs are created. -----------------

CELCOST_SRC = ROOT / "tests" / "tools" / "celcost"

OVER_BUDGET_XRD = """\
apiVersion: apiextensions.crossplane.io/v2
kind: CompositeResourceDefinition
metadata:
  name: overbudgets.example.org
spec:
  scope: Cluster
  group: example.org
  names: {kind: OverBudget, plural: overbudgets}
  versions:
    - name: v1alpha1
      served: true
      referenceable: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                words:
                  description: Unbounded strings, each matched against every other.
                  type: array
                  items: {type: string}
                  x-kubernetes-validations:
                    - rule: "self.all(a, self.all(b, a.matches(b)))"
                      message: spec.words is too expensive to check
"""


@pytest.fixture(scope="module")
def celcost() -> str:
    """tests/tools/celcost, built with Go into .tools/bin as `make setup` does."""
    binary = Path(os.environ.get("CELCOST") or ROOT / ".tools" / "bin" / "celcost")
    sources = [CELCOST_SRC / n for n in ("go.mod", "go.sum", "main.go")]
    if binary.is_file() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return str(binary)
    go = shutil.which("go")
    if not go:
        pytest.fail(
            f"celcost not built at {binary} and no Go toolchain to build it; run `make setup`"
        )
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=CELCOST_SRC, check=True, timeout=900)
    return str(binary)


@pytest.mark.parametrize("kind", XRDS)
def test_xrd_is_a_valid_crd_within_the_cel_cost_budget(celcost, kind):
    proc = subprocess.run(
        [celcost, str(XRDS[kind])], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[x]" not in proc.stdout and "within the cost budget" in proc.stdout, proc.stdout


def test_label_key_rules_fit_the_budget_only_because_labels_are_bounded(celcost, tmp_path):
    """Drop maxProperties from placement labels and the key-pattern rule goes over budget: the
    checker sees the limits that keep the real rules in, not only absurd rules."""
    text = XRDS["InferenceCluster"].read_text()
    assert text.count("maxProperties: 16\n") == 1
    xrd = tmp_path / "unbounded-labels.yaml"
    xrd.write_text(re.sub(r"\n *maxProperties: 16\n", "\n", text))
    proc = subprocess.run(
        [celcost, str(xrd)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "properties[labels].x-kubernetes-validations[0].rule: Forbidden" in proc.stdout


def test_cel_cost_checker_rejects_an_over_budget_rule(celcost, tmp_path):
    xrd = tmp_path / "overbudget.yaml"
    xrd.write_text(OVER_BUDGET_XRD)
    proc = subprocess.run(
        [celcost, str(xrd)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "properties[words].x-kubernetes-validations[0].rule: "
        "Forbidden: estimated rule cost exceeds budget" in proc.stdout
    )
    assert "estimated rule cost total for entire OpenAPIv3 schema exceeds budget" in proc.stdout
