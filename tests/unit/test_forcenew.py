"""What runs keeps the fields its provider cannot change in place (function/forcenew.py)."""

import copy
import functools

import pytest
import yaml

from function import forcenew
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import Desired
from tests.builders import EXAMPLES, all_classes, example, provider_configs, world_for
from tests.charts import converged, converged_examples
from tests.conftest import crds_dir
from tests.unit import sim

# Composed cloud kinds none of whose fields the function sets is frozen (each checked against its
# provider: the IAM Role and Policy update in place; ClusterAuth has no Terraform resource; the
# Nebius VPC kinds mark nothing RequiresReplace; an Observe-only kind is never updated).
NOTHING_FROZEN = {
    ("ec2.aws.m.upbound.io", "CapacityBlockReservation"),
    ("eks.aws.m.upbound.io", "ClusterAuth"),
    ("iam.aws.m.upbound.io", "Policy"),
    ("iam.aws.m.upbound.io", "Role"),
    ("vpc.nebius.m.upbound.io", "Network"),
    ("vpc.nebius.m.upbound.io", "Subnet"),
}
IN_CLUSTER = ("kubernetes.m.crossplane.io", "helm.m.crossplane.io", "protection.crossplane.io")


def required(source: str, classes: list[dict]) -> dict[str, list[dict]]:
    req = all_classes(classes)
    configs = provider_configs(source)
    if configs:
        req["cloud-provider-config"] = configs
    return req


def gpu_pool_key(out) -> str:
    return next(
        k
        for k, d in out.resources.items()
        if d.body["kind"] == "NodePool"
        and "guestAccelerator" in d.body["spec"]["forProvider"].get("nodeConfig", {})
    )


def test_a_gke_pool_made_with_gkes_driver_keeps_it_and_says_how_to_move():
    """A GPU pool an earlier release created with GKE's own driver installation (before the DRA
    setup) is not replaced: its accelerators stay as they run, and the XR says what to do."""
    xr, classes = example("gke")
    req = required("gke", classes)
    out = sim.converge(xr, req)
    key = gpu_pool_key(out)

    def before_dra(k, body):
        if k == key:
            accelerator = body["spec"]["forProvider"]["nodeConfig"]["guestAccelerator"][0]
            accelerator["gpuDriverInstallationConfig"] = {"gpuDriverVersion": "LATEST"}

    again = compose_cluster(xr, req, sim.observed_from(out, before_dra))
    (accelerator,) = again.resources[key].body["spec"]["forProvider"]["nodeConfig"][
        "guestAccelerator"
    ]
    assert accelerator["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "LATEST"}
    (warning,) = [r for r in again.results if r.reason == "KeptLiveField"]
    name = out.resources[key].body["metadata"]["name"]
    assert warning.severity == "Warning"
    assert warning.message.startswith(f"NodePool {name} ({key}) keeps what cannot change")
    assert "forProvider.nodeConfig.guestAccelerator stays" in warning.message
    assert '"gpuDriverVersion":"LATEST"' in warning.message
    assert '"gpuDriverVersion":"INSTALLATION_DISABLED"' in warning.message
    assert "guest_accelerator ForceNew" in warning.message
    assert "delete the NodePool" in warning.message
    # Everything else about the pool still moves; the other resources are untouched.
    others = {k: d.body for k, d in again.resources.items() if k != key}
    assert others == {k: d.body for k, d in out.resources.items() if k != key}


def test_a_shared_body_keeps_its_live_value_and_stays_as_made():
    """A subnet the network part makes once a cluster (Cloud.made_once, shared) whose live CIDR
    differs keeps it, on a copy: the next composition of the same cluster still gets the body as
    made."""
    xr, classes = example("eks")
    req = required("eks", classes)
    out = sim.converge(xr, req)
    key = next(k for k in out.resources if k.startswith("subnet-private-"))
    made = out.resources[key]
    assert made.shared and made.frozen

    def moved(k, body):
        if k == key:
            body["spec"]["forProvider"]["cidrBlock"] = "10.0.240.0/20"

    again = compose_cluster(xr, req, sim.observed_from(out, moved))
    assert again.resources[key].body["spec"]["forProvider"]["cidrBlock"] == "10.0.240.0/20"
    assert not again.resources[key].shared
    (warning,) = [r for r in again.results if r.reason == "KeptLiveField"]
    assert "forProvider.cidrBlock stays" in warning.message
    after = compose_cluster(xr, req, sim.reported(out))
    assert after.resources[key].body is made.body
    assert made.body["spec"]["forProvider"]["cidrBlock"] != "10.0.240.0/20"


def test_a_new_resource_takes_the_new_value():
    xr, classes = example("gke")
    req = required("gke", classes)
    out = sim.converge(xr, req)
    key = gpu_pool_key(out)
    seen = sim.reported(out)
    without = Observed({k: r for k, r in seen.resources.items() if k != key}, seen.status)
    again = compose_cluster(xr, req, without)
    assert again.resources[key].body == out.resources[key].body
    assert not [r for r in again.results if r.reason == "KeptLiveField"]


def test_a_class_change_keeps_the_running_vm_size():
    """An AKS agent pool changes VM size only by cycling through a second pool of GPUs: the
    running size stays, the XR says so."""
    xr, classes = example("aks")
    req = required("aks", classes)
    out = sim.converge(xr, req)
    bigger = copy.deepcopy(classes)
    pool_key, pool = next(
        (k, d.body)
        for k, d in out.resources.items()
        if d.body["kind"] == "KubernetesClusterNodePool"
    )
    live_size = pool["spec"]["forProvider"]["vmSize"]
    for cls in bigger:
        block = cls["spec"].get("provisioning", {}).get("aks")
        if block and block.get("vmSize") == live_size:
            block["vmSize"] = "Standard_ND96amsr_A100_v4"
    again = compose_cluster(xr, required("aks", bigger), sim.reported(out))
    assert again.resources[pool_key].body["spec"]["forProvider"]["vmSize"] == live_size
    (warning,) = [r for r in again.results if r.reason == "KeptLiveField"]
    assert "forProvider.vmSize" in warning.message
    assert "Standard_ND96amsr_A100_v4" in warning.message


def _one(kind: str, group: str, live: dict, new: dict) -> tuple[dict, list]:
    body = {"apiVersion": f"{group}/v1beta1", "kind": kind, "metadata": {"name": "x"}}
    desired = {"x": Desired(body={**body, "spec": {"forProvider": new}})}
    observed = Observed({"x": ObservedResource({**body, "spec": {"forProvider": live}})})
    kept, results = forcenew.keep_live(desired, observed)
    return kept["x"].body["spec"]["forProvider"], results


def test_a_new_default_that_would_replace_applies_to_new_resources_only():
    """Set by this release, unset on the live resource: left out, with a Warning."""
    spec, results = _one(
        "NodeGroup",
        "eks.aws.m.upbound.io",
        {"amiType": "AL2023_x86_64_NVIDIA"},
        {"amiType": "AL2023_x86_64_NVIDIA", "diskSize": 200},
    )
    assert spec == {"amiType": "AL2023_x86_64_NVIDIA"}
    (warning,) = results
    assert "forProvider.diskSize stays unset" in warning.message


def test_a_block_the_live_resource_lacks_stays_absent_whole():
    """A launch template added to a node group created without one: the whole block stays out
    (not a launchTemplate with a version and no name), and the sizes it replaced stay."""
    spec, results = _one(
        "NodeGroup",
        "eks.aws.m.upbound.io",
        {"instanceTypes": ["g6.xlarge"], "diskSize": 100},
        {"launchTemplate": {"name": "lt-x", "version": "1"}},
    )
    assert spec == {"instanceTypes": ["g6.xlarge"], "diskSize": 100}
    (warning,) = results
    assert "forProvider.launchTemplate.name stays unset" in warning.message
    assert "forProvider.diskSize stays 100" in warning.message


def test_a_storage_class_keeps_its_binding_mode_on_a_live_cluster():
    """The API server refuses to update a StorageClass's binding mode: a live one keeps it, and
    the XR says how to move (GKE's Filestore class now binds where the first pod runs)."""
    manifest = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "x"}
    spec, results = _one(
        "Object",
        "kubernetes.m.crossplane.io",
        {"manifest": {**manifest, "volumeBindingMode": "Immediate"}},
        {"manifest": {**manifest, "volumeBindingMode": "WaitForFirstConsumer"}},
    )
    assert spec["manifest"]["volumeBindingMode"] == "Immediate"
    (warning,) = results
    assert 'forProvider.manifest.volumeBindingMode stays "Immediate"' in warning.message
    assert "delete the StorageClass on the workload cluster" in warning.message
    # Any other manifest is updated as it comes.
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1}}
    spec, results = _one(
        "Object",
        "kubernetes.m.crossplane.io",
        {"manifest": other},
        {"manifest": {**other, "spec": {"replicas": 2}}},
    )
    assert spec["manifest"]["spec"] == {"replicas": 2} and not results


def test_a_field_the_release_stops_setting_keeps_its_live_value():
    spec, results = _one("NodeGroup", "eks.aws.m.upbound.io", {"capacityType": "ON_DEMAND"}, {})
    assert spec == {"capacityType": "ON_DEMAND"}
    assert len(results) == 1


def test_in_place_changes_are_left_alone():
    spec, results = _one(
        "NodeGroup", "eks.aws.m.upbound.io", {"version": "1.35"}, {"version": "1.36"}
    )
    assert spec == {"version": "1.36"}
    assert not results


@pytest.mark.parametrize(
    ("live", "new", "kept"),
    [
        (True, False, True),  # true -> false replaces the cluster
        (False, True, False),  # false -> true is in place
        (None, True, False),
    ],
)
def test_oidc_issuer_freezes_only_when_turned_off(live, new, kept):
    spec, results = _one(
        "KubernetesCluster",
        "containerservice.azure.m.upbound.io",
        {} if live is None else {"oidcIssuerEnabled": live},
        {"oidcIssuerEnabled": new},
    )
    assert (spec.get("oidcIssuerEnabled") != new) == kept
    assert bool(results) == kept


@pytest.mark.parametrize(
    ("live", "new", "kept"),
    [
        ("Ubuntu", "Ubuntu2204", False),
        ("Ubuntu", "AzureLinux", False),
        ("Ubuntu", "Windows2022", True),
    ],
)
def test_aks_os_sku_moves_in_place_between_linux_families(live, new, kept):
    spec, _ = _one(
        "KubernetesClusterNodePool",
        "containerservice.azure.m.upbound.io",
        {"osSku": live},
        {"osSku": new},
    )
    assert (spec["osSku"] == live) == kept


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict]:
    """(group, kind) -> the forProvider schema of its served version, from ../shared/crds."""
    out = {}
    for path in crds_dir().rglob("*.yaml"):
        if "_alternatives" in path.parts or "workload" in path.parts:
            continue
        crd = yaml.safe_load(path.read_text())
        spec = crd.get("spec", {})
        for version in spec.get("versions", []):
            schema = version.get("schema", {}).get("openAPIV3Schema", {})
            props = schema.get("properties", {}).get("spec", {}).get("properties", {})
            if "forProvider" in props:
                out[(spec["group"], spec["names"]["kind"])] = props["forProvider"]
    return out


def test_every_frozen_field_is_a_field_of_its_kind():
    """A typo in the table would freeze nothing: each path exists in the real CRD."""
    schemas = _crd_schemas()
    for (group, kinds), fields in forcenew.FORCE_NEW.items():
        kind = kinds.split("/")[0]  # Object/<manifest kind>: the Object's schema
        assert (group, kind) in schemas, (group, kind)
        for field in fields:
            node = schemas[(group, kind)]
            for step in field.path:
                if node.get("x-kubernetes-preserve-unknown-fields"):
                    break  # an embedded manifest (an Object's): its own kind's schema decides
                node = node.get("properties", {}).get(step) or node.get("items", {}).get(
                    "properties", {}
                ).get(step)
                assert node is not None, (group, kind, field.path)


def test_every_composed_cloud_kind_is_classified():
    """A kind a release starts composing must say which of its fields cannot change in place."""
    composed = {
        (d["apiVersion"].split("/")[0], d["kind"])
        for example_name in converged_examples()
        for d in converged(example_name)
        if "spec" in d and "forProvider" in d["spec"] and not d["apiVersion"].startswith(IN_CLUSTER)
    }
    unclassified = composed - set(forcenew.FORCE_NEW) - NOTHING_FROZEN
    assert not unclassified, sorted(unclassified)
    assert not NOTHING_FROZEN & set(forcenew.FORCE_NEW)


@pytest.mark.parametrize(
    "source", sorted(p.parent.name for p in EXAMPLES.glob("*/inferencecluster.yaml"))
)
def test_every_shared_body_comes_with_its_frozen_fields(source):
    """keep_live reads a shared body (made once a cluster: the stack's, Usages, probes,
    detectors, a cloud's parts) only when it comes with frozen fields: that is only right while
    every shared body comes with its kind's."""
    xr, classes = example(source)
    out = sim.converge(xr, required(source, classes), world_for(xr))
    shared = {k: d for k, d in out.resources.items() if d.shared}
    assert shared
    assert not [k for k, d in shared.items() if d.frozen != forcenew.composed(d.body)]
