"""Adoption on Existing clusters: a cert-manager someone else installed is adopted, never installed
beside; an absent one is installed; what the function installed stays its own."""

import copy
import json
from dataclasses import replace

import pytest
import yaml

from function.clusters.base import PROVIDER_CONFIG_KEYS
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.serving import adoption, conflicts, dra_driver_age, gateway_api, gpus, looking
from function.versions import CHARTS, GATEWAY_API_BUNDLE
from function.workload import GPU_NODE_LABEL
from tests import nodes
from tests.builders import all_classes, example, world_for
from tests.charts import _template, chart_path, helm_bin
from tests.golden import GOLDEN
from tests.sim.providers import World, conditions, gateway_api_crd, observe
from tests.sim.workload import inference_gateway
from tests.unit import sim

SCHEMAS = {"inference-gateway-kind": True}
DETECT = adoption.detector_key("cert-manager")
RELEASE = "release-cert-manager"
# What comes after cert-manager in the table (function/serving/components.py).
AFTER_CERT_MANAGER = ("release-trust-manager", "gateway-selfsigned-issuer")


def required(classes):
    return {**all_classes(classes), "inference-gateways": [inference_gateway("fleet-a")]}


def helm_meta(name: str, release: str | None, namespace: str, labels: dict) -> dict:
    """An object's metadata as Helm leaves it when release installed it (None: outside Helm)."""
    meta: dict = {"name": name, "labels": labels}
    if release:
        meta["annotations"] = {
            "meta.helm.sh/release-name": release,
            "meta.helm.sh/release-namespace": namespace,
        }
    return meta


def crd(
    release: str | None, version: str = "v1.17.2", fields: bool = True, namespace="platform"
) -> dict:
    """certificates.cert-manager.io as the API server has it (only what the function reads)."""
    spec_props: dict = {"issuerRef": {"type": "object"}}
    if fields:
        spec_props["privateKey"] = {"properties": {"rotationPolicy": {"type": "string"}}}
        spec_props["revisionHistoryLimit"] = {"type": "integer"}
    meta = helm_meta(
        "certificates.cert-manager.io", release, namespace, {"app.kubernetes.io/version": version}
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": {
            "versions": [
                {
                    "name": "v1",
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"properties": {"spec": {"properties": spec_props}}}
                    },
                }
            ]
        },
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }


ABSENT = {
    "conditions": conditions(
        ready=False,
        reason="ReconcileError",
        message="cannot observe external resource: external resource does not exist",
    )
}


def detector_status(found: dict | None) -> dict:
    if found is None:
        return ABSENT
    return {"conditions": conditions(), "atProvider": {"manifest": found}}


def run(found: dict | None, passes: int = 25, start=None, world: World | None = None):
    """Reconciles of the Existing example; cert-manager's detector finds `found` (None:
    nothing), node-feature-discovery's what runs in the world."""
    xr, classes = example("existing")
    out = start or compose_cluster(xr, required(classes), Observed(), SCHEMAS)
    said = [] if start else list(out.results)
    for _ in range(passes):
        resources = {}
        for key, desired in out.resources.items():
            body = copy.deepcopy(desired.body)
            seen = observe(body, world).status
            body["status"] = detector_status(found) if key == DETECT else seen
            resources[key] = ObservedResource(body)
        out = compose_cluster(
            xr,
            sim.answered(required(classes), out, world),
            Observed(resources=resources, status=out.status),
            SCHEMAS,
        )
        said = sim.said_once(said, out.results)
    # What the reconciles said, each once (an adoption is announced once, not at every pass).
    return replace(out, results=said)


def condition(out, kind):
    return next(c for c in out.conditions if c.type == kind)


def test_nothing_of_cert_manager_is_installed_before_the_cluster_is_looked_at():
    xr, classes = example("existing")
    out = compose_cluster(xr, required(classes), Observed(), SCHEMAS)
    for _ in range(3):  # the ProviderConfigs, then the detector
        resources = {}
        for key, desired in out.resources.items():
            body = copy.deepcopy(desired.body)
            body["status"] = observe(body).status
            resources[key] = ObservedResource(body)
        if DETECT in resources:
            del resources[DETECT]  # composed, not observed yet
            break
        out = compose_cluster(xr, required(classes), Observed(resources=resources), SCHEMAS)
    assert DETECT in out.resources
    assert RELEASE not in out.resources
    assert out.resources[DETECT].body["spec"]["managementPolicies"] == ["Observe"]
    manifest = out.resources[DETECT].body["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"] == {"name": "certificates.cert-manager.io"}
    # Asked again with the detector composed but not observed: still nothing installed.
    again = compose_cluster(xr, required(classes), Observed(resources=resources), SCHEMAS)
    assert RELEASE not in again.resources and DETECT in again.resources


def test_an_absent_cert_manager_is_installed():
    out = run(None)
    assert RELEASE in out.resources
    assert condition(out, "BackendReady").status is True
    # "Does not exist" is the detector's answer, not a provider failure.
    assert not [r for r in out.results if r.reason == "ProviderError"]


def test_a_cert_manager_of_another_release_is_adopted_and_the_stack_goes_on():
    out = run(crd("platform-cert-manager"))
    assert RELEASE not in out.resources
    assert all(k in out.resources for k in AFTER_CERT_MANAGER)
    backend = condition(out, "BackendReady")
    assert backend.status is True, backend.message
    (adopted,) = [r for r in out.results if r.reason == "ComponentAdopted"]
    assert adopted.severity == "Normal"
    assert "Helm release platform/platform-cert-manager (v1.17.2)" in adopted.message


def test_a_cert_manager_outside_helm_is_adopted_too():
    out = run(crd(None))
    assert RELEASE not in out.resources
    assert "an install outside Helm" in next(
        r.message for r in out.results if r.reason == "ComponentAdopted"
    )


def test_the_functions_own_kept_crds_are_installed_over_again():
    out = run(crd("mp-cert-manager", namespace="cert-manager"))
    assert RELEASE in out.resources


def test_a_release_named_as_the_functions_in_another_namespace_is_not_its_own():
    out = run(crd("mp-cert-manager", namespace="other-control-plane"))
    assert RELEASE not in out.resources
    assert any(r.reason == "ComponentAdopted" for r in out.results)


def test_a_cert_manager_too_old_for_the_stack_is_named_and_the_stack_waits():
    out = run(crd("platform-cert-manager", "v1.1.0", fields=False))
    assert RELEASE not in out.resources
    assert not any(k in out.resources for k in AFTER_CERT_MANAGER)
    (refused,) = [r for r in out.results if r.reason == "AdoptionRefused"]
    assert refused.severity == "Warning"
    assert "spec.privateKey.rotationPolicy, spec.revisionHistoryLimit" in refused.message
    assert condition(out, "BackendReady").status is False
    assert out.ready is False


def test_what_the_function_installed_stays_when_another_appears():
    installed = run(None)
    assert RELEASE in installed.resources
    later = run(crd("platform-cert-manager"), passes=3, start=installed)
    assert RELEASE in later.resources
    assert not [r for r in later.results if r.reason == "ComponentAdopted"]


@pytest.mark.parametrize("source", ["eks", "aks"])
def test_a_provisioned_cluster_looks_for_nothing(source):
    xr, classes = example(source)
    out = sim.converge(xr, required(classes), world_for(xr), SCHEMAS)
    assert DETECT not in out.resources
    assert RELEASE in out.resources


# --- node-feature-discovery: found by its worker DaemonSet, wherever and however installed --------

NFD = "node-feature-discovery"
NFD_DETECT = adoption.detector_key(NFD)
NFD_RELEASE = "release-node-feature-discovery"
NFD_FOUND = adoption.members_key(NFD)


def nfd_worker(release: str | None, namespace: str = "gpu-operator") -> dict:
    """An NFD worker DaemonSet as its chart labels it (0.18.3 templates/worker.yaml), installed
    by release (None: outside Helm), as the GPU Operator's subchart names it."""
    labels = {
        "app.kubernetes.io/name": NFD,
        "app.kubernetes.io/instance": release or "nfd",
        "app.kubernetes.io/version": "v0.17.3",
        "role": "worker",
    }
    meta = helm_meta(
        f"{release or 'nfd'}-node-feature-discovery-worker", release, namespace, labels
    )
    meta["namespace"] = namespace
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta, "status": {}}


def running(*objects: dict) -> World:
    return World(running=list(objects))


def reported(out, world: World | None = None) -> dict[str, ObservedResource]:
    """What out composed, as the providers report it, by resource key."""
    resources = {k: ObservedResource(copy.deepcopy(d.body)) for k, d in out.resources.items()}
    for r in resources.values():
        r.body["status"] = observe(r.body, world).status
    return resources


def holding(edit, members: list[dict] | None = None, passes: int = 25):
    """Reconciles of the Existing example with NFD's collection as edit leaves it each time
    (its members handed over as given): the stack converges around an undecided NFD."""
    xr, classes = example("existing")
    out = compose_cluster(xr, required(classes), Observed(), SCHEMAS)
    for _ in range(passes):
        resources = reported(out)
        if NFD_DETECT in resources:
            edit(resources[NFD_DETECT].body)
        given = {**sim.answered(required(classes), out), NFD_FOUND: members or []}
        out = compose_cluster(xr, given, Observed(resources=resources), SCHEMAS)
    return out


def test_nfd_is_looked_for_by_its_workers_labels_in_every_namespace():
    out = run(None, passes=4)
    collection = out.resources[NFD_DETECT].body
    assert collection["kind"] == "ObservedObjectCollection"
    assert collection["spec"]["observeObjects"] == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "selector": {"matchLabels": {"app.kubernetes.io/name": NFD, "role": "worker"}},
    }
    assert "namespace" not in collection["spec"]["observeObjects"]


def test_an_absent_nfd_is_installed_and_no_longer_looked_for():
    out = run(None)
    assert NFD_RELEASE in out.resources
    assert adoption.GPU_RULE_KEY not in out.resources
    assert NFD_FOUND not in out.requirements  # its release is the function's: nothing to decide
    assert condition(out, "BackendReady").status is True


def test_nothing_of_nfd_is_installed_while_the_collection_has_not_listed():
    out = holding(lambda body: body.update(status={"conditions": []}))
    assert NFD_RELEASE not in out.resources
    assert NFD_FOUND in out.requirements
    backend = condition(out, "BackendReady").message
    assert "waiting for 1 of" in backend and "looking for one already installed" in backend


def test_none_found_counts_only_when_a_second_reconcile_finds_none_again():
    """Crossplane's cache may not hold the members yet when the collection turns Ready: the
    first empty answer marks the detector, the second installs."""

    def unmarked(body):
        body["metadata"].pop("annotations", None)

    first = holding(unmarked)
    assert NFD_RELEASE not in first.resources
    marked = first.resources[NFD_DETECT].body["metadata"].get("annotations")
    assert marked == {looking.LOOKED: looking.NONE_FOUND}
    assert "looking again" in condition(first, "BackendReady").message
    # Marked, and none found again: installed.
    second = holding(lambda body: None)
    assert NFD_RELEASE in second.resources
    # Marked, but found at the second look: adopted, and marked so instead.
    world = running(nfd_worker("gpu-operator"))
    xr, classes = example("existing")
    resources = reported(first, world)
    resources[NFD_DETECT].body["metadata"]["annotations"] = marked
    late = compose_cluster(
        xr, sim.answered(required(classes), first, world), Observed(resources=resources), SCHEMAS
    )
    assert NFD_RELEASE not in late.resources
    assert late.resources[NFD_DETECT].body["metadata"]["annotations"] == {
        looking.LOOKED: looking.ADOPTED
    }
    assert any(r.reason == "ComponentAdopted" for r in late.results)


def test_an_nfd_of_another_release_is_adopted_with_the_functions_gpu_rule_beside_it():
    out = run(None, world=running(nfd_worker("gpu-operator")))
    assert NFD_RELEASE not in out.resources
    (adopted,) = [r for r in out.results if r.reason == "ComponentAdopted"]
    assert "node-feature-discovery: adopted Helm release gpu-operator/gpu-operator (v0.17.3)" in (
        adopted.message
    )
    rule = out.resources[adoption.GPU_RULE_KEY].body["spec"]["forProvider"]["manifest"]
    assert rule["kind"] == "NodeFeatureRule"
    (labelled,) = rule["spec"]["rules"]
    # The label the DRA driver's kubelet plugin is placed by.
    assert labelled["labels"] == {GPU_NODE_LABEL: "true"}
    assert condition(out, "BackendReady").status is True


def test_an_adoption_is_announced_once_not_at_every_reconcile():
    """The recorder passes 25 events per object, then one every five minutes: the Normal event
    stops once the detector is seen marked adopted, leaving room for the Warnings."""
    xr, classes = example("existing")
    world = running(nfd_worker("gpu-operator"))
    told = sim.converge(xr, required(classes), world, SCHEMAS, every_result=True)
    assert [r.reason for r in told.results].count("ComponentAdopted") == 1
    settled = sim.converge(xr, required(classes), world, SCHEMAS)
    assert not [r for r in settled.results if r.reason == "ComponentAdopted"]
    assert "node-feature-discovery (Helm release gpu-operator/gpu-operator" in (
        condition(settled, "BackendReady").message
    )


def test_an_nfd_outside_helm_is_adopted_too():
    out = run(None, world=running(nfd_worker(None, "kube-system")))
    assert NFD_RELEASE not in out.resources
    assert any("an install outside Helm" in r.message for r in out.results)


def test_the_functions_own_nfd_found_again_is_installed_over_again():
    own = nfd_worker("mp-node-feature-discovery", "node-feature-discovery")
    out = run(None, world=running(own))
    assert NFD_RELEASE in out.resources
    assert adoption.GPU_RULE_KEY not in out.resources


def test_a_member_not_read_yet_holds_the_install():
    xr, classes = example("existing")
    world = running(nfd_worker("gpu-operator"))
    out = run(None, passes=25, world=world)
    members = sim.answered(required(classes), out, world)[NFD_FOUND]
    for member in members:
        member["status"] = {"conditions": []}  # made by the collection, not observed yet
    resources = reported(out, world)
    again = compose_cluster(
        xr, {**required(classes), NFD_FOUND: members}, Observed(resources=resources), SCHEMAS
    )
    assert NFD_RELEASE not in again.resources
    assert not [r for r in again.results if r.reason == "ComponentAdopted"]


def test_a_collection_the_provider_cannot_list_says_so_in_its_words():
    refused = conditions(
        ready=False, reason="ReconcileError", message='daemonsets.apps is forbidden: User "x"'
    )
    out = holding(lambda body: body.update(status={"conditions": refused}))
    assert NFD_RELEASE not in out.resources
    assert "daemonsets.apps is forbidden" in condition(out, "BackendReady").message


def test_once_adopted_a_passing_error_does_not_make_the_stack_wait_again():
    world = running(nfd_worker("gpu-operator"))
    adopted = run(None, world=world)
    xr, classes = example("existing")
    resources = reported(adopted, world)
    resources[NFD_DETECT].body["status"] = {
        "conditions": conditions(ready=False, reason="ReconcileError", message="etcd timeout")
    }
    again = compose_cluster(
        xr, sim.answered(required(classes), adopted, world), Observed(resources=resources), SCHEMAS
    )
    assert NFD_RELEASE not in again.resources
    assert condition(again, "BackendReady").status is True


def test_the_functions_nfd_stays_when_another_appears_and_an_adopted_one_gone_is_replaced():
    installed = run(None)
    later = run(None, passes=3, start=installed, world=running(nfd_worker("gpu-operator")))
    assert NFD_RELEASE in later.resources
    assert not [r for r in later.results if r.reason == "ComponentAdopted"]

    adopted = run(None, world=running(nfd_worker("gpu-operator")))
    gone = run(None, start=adopted)
    assert NFD_RELEASE in gone.resources  # the stack needs one: the function's now
    assert adoption.GPU_RULE_KEY in gone.resources  # composed once, only the spec removes it


def test_the_gpu_rule_labels_nvidia_gpus_as_the_dra_driver_places_its_plugin_and_nothing_else():
    gpu = nodes.rule_labels([adoption.GPU_RULE], [nodes.NVIDIA_GPU])
    assert gpu == {GPU_NODE_LABEL: "true"}
    nic = {"class": "0207", "vendor": "15b3", "device": "1021"}  # a ConnectX-7 on InfiniBand
    assert nodes.rule_labels([adoption.GPU_RULE], [nic]) == {}
    vga = {"class": "0300", "vendor": "10de", "device": "26b9"}  # one that presents as VGA
    assert nodes.rule_labels([adoption.GPU_RULE], [vga]) == {GPU_NODE_LABEL: "true"}


# --- LeaderWorkerSet and Grove: found by the admission webhooks of fixed names they install -----


def installed(component: str, release: str | None, namespace: str = "platform") -> dict:
    """The object a component's detector looks for, as another release installed it: Helm's
    annotations and no version label (the charts' templates give these objects none); a
    ClusterRole's rules as KAI's scheduler role has them (kai-scheduler v0.16.8
    templates/rbac/scheduler.yaml)."""
    d = adoption.DETECTORS[component]
    found = {
        "apiVersion": d.api_version,
        "kind": d.kind,
        "metadata": helm_meta(d.name, release, namespace, {}),
    }
    if d.kind == "ClusterRole":
        found["rules"] = [
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get"]},
            {"apiGroups": ["scheduling.run.ai"], "resources": ["queues"], "verbs": ["get"]},
        ]
    return found


def converged_with(source: str, **detected) -> object:
    xr, classes = example(source)
    world = World(detected=detected)
    return sim.converge(xr, required(classes), world, SCHEMAS, every_result=True)


# The controllers found by one cluster-scoped object their charts name the same whatever the
# release, and an Existing example whose stack has each.
BY_NAME = pytest.mark.parametrize(
    ("source", "component"),
    [
        ("existing", "leader-worker-set"),
        ("existing-dynamo", "grove"),
        ("existing-dynamo", "kai-scheduler"),
        ("existing", "nvidia-dra-driver"),
    ],
)


@BY_NAME
def test_a_controller_another_release_installed_is_adopted_by_its_fixed_object(source, component):
    name = adoption.DETECTORS[component].name
    out = converged_with(source, **{name: installed(component, "platform-" + component)})
    assert f"release-{component}" not in out.resources
    assert adoption.detector_key(component) in out.resources
    (adopted,) = [r for r in out.results if r.reason == "ComponentAdopted"]
    assert f"Helm release platform/platform-{component}" in adopted.message
    backend = condition(out, "BackendReady")
    assert backend.status is True
    # The XR says, per cluster, what it runs on that the function did not install.
    assert backend.message.endswith(
        f"; adopted, not installed: {component} (Helm release platform/platform-{component})"
    )


@BY_NAME
def test_an_absent_controller_is_installed_and_no_longer_looked_for(source, component):
    name = adoption.DETECTORS[component].name
    out = converged_with(source, **{name: None})
    assert f"release-{component}" in out.resources
    assert condition(out, "BackendReady").status is True


def test_an_adopted_leader_worker_set_gets_no_disruption_budget_of_the_functions():
    """The budget selects the function's own release's controller pods: none beside another's."""
    name = adoption.DETECTORS["leader-worker-set"].name
    adopted = converged_with("existing", **{name: installed("leader-worker-set", "platform-lws")})
    assert "lws-disruption-budget" not in adopted.resources
    own = converged_with("existing", **{name: None})
    budget = own.resources["lws-disruption-budget"].body["spec"]["forProvider"]["manifest"]
    assert budget["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("release", ["gpu-operator", None])
def test_an_adopted_dra_driver_gets_nothing_made_for_the_functions_release(release):
    """Not its namespace (a namespace the adopted release runs in, taken over by an Object, would
    be deleted with the XR), nor the watch on the kubelet plugin the function's release names
    (an adopted one's may be named otherwise: nameOverride, a renamed chart)."""
    name = adoption.DETECTORS["nvidia-dra-driver"].name
    out = converged_with(
        "existing",
        **{name: installed("nvidia-dra-driver", release, "nvidia-dra-driver")},
    )
    made_for_release = {
        "release-nvidia-dra-driver",
        "dra-driver-namespace",
        "dra-driver-critical-pods-quota",
        "dra-kubelet-plugin",
    }
    assert not made_for_release & out.resources.keys()
    # What comes after the driver stands on the adopted one: the GPU probes' namespace.
    assert gpus.NAMESPACE_KEY in out.resources
    assert condition(out, "BackendReady").status is True


# Both lines of the NVIDIA DRA driver as published, as another release installed them.
DRA_LINES = pytest.mark.parametrize(
    ("chart", "version"), [("nvidia-dra-driver-gpu", "25.12.0"), ("dra-driver-nvidia-gpu", "0.4.1")]
)
DRA_RELEASE = ("gpu-operator", "platform-dra")  # namespace, release


def dra_driver(chart: str, version: str, app_version: str | None = None) -> dict[str, dict]:
    """The DeviceClass gpu.nvidia.com and the kubelet plugin DaemonSet the real chart, rendered
    by the real Helm, installs for DRA_RELEASE, with Helm's annotations (app_version: the
    appVersion an older chart of the line labels them with)."""
    path = chart_path(chart, version)
    assert path is not None, (chart, version)
    namespace, release = DRA_RELEASE
    values = {"gpuResourcesEnabledOverride": True, "resources": {"gpus": {"enabled": True}}}
    rendered = _template(path, release, namespace, json.dumps(values), helm_bin())
    found = {}
    wanted = {
        ("DeviceClass", adoption.DETECTORS["nvidia-dra-driver"].name),
        ("DaemonSet", f"{chart}-kubelet-plugin"),
    }
    for made in rendered:
        if (made["kind"], made["metadata"]["name"]) not in wanted:
            continue
        d = copy.deepcopy(made)
        labels = d["metadata"].get("labels") or {}
        if app_version and adoption.VERSION_LABEL in labels:
            labels[adoption.VERSION_LABEL] = app_version
        d["metadata"] = helm_meta(d["metadata"]["name"], release, namespace, labels)
        if d["kind"] == "DaemonSet":
            d["metadata"]["namespace"] = namespace
        found[d["kind"]] = d
    assert found.keys() == {"DeviceClass", "DaemonSet"}, found.keys()
    return found


def converged_with_dra(found: dict[str, dict]):
    device_class = found["DeviceClass"]
    world = World(
        detected={device_class["metadata"]["name"]: device_class}, running=[found["DaemonSet"]]
    )
    xr, classes = example("existing")
    return sim.converge(xr, required(classes), world, SCHEMAS, every_result=True)


@DRA_LINES
def test_a_dra_driver_of_either_line_is_found_and_adopted_as_it_is(chart, version):
    out = converged_with_dra(dra_driver(chart, version))
    assert "release-nvidia-dra-driver" not in out.resources
    (adopted,) = [r for r in out.results if r.reason == "ComponentAdopted"]
    assert "Helm release gpu-operator/platform-dra" in adopted.message
    # Its DaemonSets are read where its release runs, and its version serves.
    looked = out.resources[dra_driver_age.KEY].body["spec"]["observeObjects"]
    assert looked["namespace"] == "gpu-operator"
    assert looked["selector"] == {"matchLabels": {"app.kubernetes.io/instance": "platform-dra"}}
    assert not [r for r in out.results if r.reason == dra_driver_age.REASON]
    assert gpus.NAMESPACE_KEY in out.resources


def test_a_dra_driver_older_than_25_12_is_adopted_with_a_warning_naming_it():
    """v25.8.1's chart labels its objects so (its appVersion; its DaemonSet otherwise as
    25.12.0's for what is read here)."""
    found = dra_driver("nvidia-dra-driver-gpu", "25.12.0", app_version="25.8.1")
    out = converged_with_dra(found)
    assert "release-nvidia-dra-driver" not in out.resources
    (warning,) = {r.message: r for r in out.results if r.reason == dra_driver_age.REASON}.values()
    assert warning.severity == "Warning"
    assert warning.message == (
        "nvidia-dra-driver: adopted Helm release gpu-operator/platform-dra runs "
        "nvidia-dra-driver-gpu-kubelet-plugin (25.8.1), a driver older than 25.12.0 whose "
        "kubelet plugin predates the admin-access claims the GPU probes make: upgrade it to "
        f"dra-driver-nvidia-gpu {CHARTS['nvidia-dra-driver'].version} or later (what the function "
        "would install)"
    )
    # Adopted all the same: the stack goes on.
    assert condition(out, "BackendReady").status is True
    assert gpus.NAMESPACE_KEY in out.resources


def test_a_dra_driver_outside_helm_is_adopted_without_reading_its_version():
    found = dra_driver("dra-driver-nvidia-gpu", "0.4.1")
    found["DeviceClass"]["metadata"].pop("annotations")
    out = converged_with_dra(found)
    assert "release-nvidia-dra-driver" not in out.resources
    assert dra_driver_age.KEY not in out.resources


@pytest.mark.parametrize(
    ("version", "old"),
    [
        ("25.8.1", True),
        ("v25.3.2", True),
        ("25.3.0-rc.5", True),
        ("0.1.0", True),  # NVIDIA's builds before 25.3
        ("25.12.0", False),
        ("0.4.0", False),
        ("0.4.1", False),
        ("0.5.0-dev", False),
        ("26.3.0", False),
        ("main", False),
        (None, False),
    ],
)
def test_which_dra_driver_versions_predate_admin_access(version, old):
    assert dra_driver_age.outdated(version) is old


def test_nothing_made_for_the_dra_drivers_release_before_the_cluster_is_looked_at():
    xr, classes = example("existing")
    detect = adoption.detector_key("nvidia-dra-driver")
    out = compose_cluster(xr, required(classes), Observed(), SCHEMAS)
    while detect not in out.resources:  # the ProviderConfigs first
        out = compose_cluster(xr, required(classes), sim.reported(out), SCHEMAS)
    assert "dra-driver-namespace" not in out.resources
    # Once it answers that none runs, and no GPU device plugin is found twice running, the
    # function's own goes on, its namespace first.
    for _ in range(4):
        out = compose_cluster(xr, sim.answered(required(classes), out), sim.reported(out), SCHEMAS)
        if "dra-driver-namespace" in out.resources:
            break
        assert "release-nvidia-dra-driver" not in out.resources
    assert "dra-driver-namespace" in out.resources
    assert {c.key for c in conflicts.CONFLICTS["nvidia-dra-driver"]} <= out.resources.keys()


def test_an_adopted_kai_scheduler_carries_grove_and_the_functions_queues():
    name = adoption.DETECTORS["kai-scheduler"].name
    out = converged_with("existing-dynamo", **{name: installed("kai-scheduler", "kai")})
    assert "release-kai-scheduler" not in out.resources
    assert {"release-grove", "kai-queue-root", "kai-queue"} <= out.resources.keys()
    assert condition(out, "BackendReady").status is True


def test_a_cluster_role_of_kais_name_that_is_not_kais_is_refused_not_adopted():
    """Another project's ClusterRole kai-scheduler: the function's release would meet Helm's
    ownership error on it, so the XR says so instead of adopting it."""
    name = adoption.DETECTORS["kai-scheduler"].name
    theirs = installed("kai-scheduler", "hw-operator")
    theirs["rules"] = [{"apiGroups": ["kai.hwcopeland.net"], "resources": ["*"], "verbs": ["*"]}]
    out = converged_with("existing-dynamo", **{name: theirs})
    assert "release-kai-scheduler" not in out.resources
    assert "release-grove" not in out.resources
    (refused,) = [r for r in out.results if r.reason == "AdoptionRefused"]
    assert "ClusterRole kai-scheduler of Helm release platform/hw-operator" in refused.message
    assert "scheduling.run.ai" in refused.message
    assert condition(out, "BackendReady").status is False


def test_once_adopted_a_passing_error_on_any_detector_does_not_make_the_stack_wait_again():
    name = adoption.DETECTORS["kai-scheduler"].name
    xr, classes = example("existing-dynamo")
    world = World(detected={name: installed("kai-scheduler", "kai")})
    out = sim.converge(xr, required(classes), world, SCHEMAS)
    key = adoption.detector_key("kai-scheduler")
    assert out.resources[key].body["metadata"]["annotations"] == {looking.LOOKED: looking.ADOPTED}
    observed = sim.reported(out, world)
    observed.resources[key].body["status"] = {
        "conditions": conditions(ready=False, reason="ReconcileError", message="dial tcp: timeout")
    }
    again = compose_cluster(xr, sim.answered(required(classes), out, world), observed, SCHEMAS)
    assert condition(again, "BackendReady").status is True
    assert again.resources.keys() == out.resources.keys()


# --- trust-manager: found by its Deployment's labels, adopted where it reads the gateway's CA -----

TRUST = "trust-manager"


def trust_manager(
    values: dict, replicas: int = 1, release: str = "platform-trust", namespace: str = "platform"
) -> dict:
    """The Deployment the real trust-manager chart (v0.24.0) installs for another release."""
    return deployment_of(TRUST, values, replicas, release, namespace)


def deployment_of(
    component: str, values: dict, replicas: int, release: str, namespace: str
) -> dict:
    """The controller Deployment the component's real chart, rendered by the real Helm, installs
    for another release with these values, as the API server reports it."""
    chart = chart_path(CHARTS[component].name, CHARTS[component].version)
    assert chart is not None
    rendered = _template(chart, release, namespace, json.dumps(values), helm_bin())
    wanted = dict(adoption.DETECTORS[component].labels).items()
    (deployment,) = [
        d
        for d in rendered
        if d["kind"] == "Deployment" and wanted <= (d["metadata"].get("labels") or {}).items()
    ]
    deployment = copy.deepcopy(deployment)
    meta = deployment["metadata"]
    # Helm annotates what it installs with its release (helm template leaves that out).
    meta["annotations"] = {
        "meta.helm.sh/release-name": release,
        "meta.helm.sh/release-namespace": namespace,
    }
    # A Deployment scaled to 0 is Available too, with no replica available.
    available = {"type": "Available", "status": "True"}
    deployment["status"] = {"conditions": [available], "availableReplicas": replicas}
    return deployment


TRUSTING_OURS = {"app": {"trust": {"namespace": "modelplane-system"}}}


def test_a_trust_manager_reading_the_functions_namespace_is_adopted_and_the_gateway_ca_goes_on():
    out = converged_with_world("existing", running(trust_manager(TRUSTING_OURS)))
    assert "release-trust-manager" not in out.resources
    assert {"gateway-ca-bundle", "gateway-ca-configmap"} <= out.resources.keys()
    (adopted,) = [r for r in out.results if r.reason == "ComponentAdopted"]
    assert "trust-manager: adopted Helm release platform/platform-trust (v0.24.0)" in (
        adopted.message
    )
    backend = condition(out, "BackendReady")
    assert backend.status is True
    assert "trust-manager (Helm release platform/platform-trust (v0.24.0))" in backend.message


def test_a_trust_manager_reading_another_namespace_is_refused_and_says_what_to_change():
    """The chart's default trust namespace is cert-manager: it would never find the gateway's
    CA, and the function's release would meet its ClusterRole trust-manager."""
    out = converged_with_world("existing", running(trust_manager({})))
    assert "release-trust-manager" not in out.resources
    assert "gateway-ca-bundle" not in out.resources
    (refused,) = [r for r in out.results if r.reason == "AdoptionRefused"]
    assert refused.severity == "Warning"
    assert refused.message == (
        "trust-manager: Helm release platform/platform-trust (v0.24.0) runs with "
        "--trust-namespace=cert-manager, and it reads Bundle sources only there, so it would "
        "never publish the gateway's CA (its Secret is in modelplane-system): the function "
        "cannot install its own beside it (two would reconcile the same Bundles); if no Bundle "
        "of yours reads that namespace, run it with --trust-namespace=modelplane-system "
        "(app.trust.namespace)"
    )
    backend = condition(out, "BackendReady")
    assert backend.status is False
    assert "--trust-namespace=cert-manager" in backend.message


def test_a_trust_manager_writing_targets_elsewhere_only_is_refused():
    """From v0.20 a trust-manager may write Bundle targets to listed namespaces only, and still
    calls the Bundle Synced: the gateway's CA ConfigMap would never appear."""
    values = {"app": {**TRUSTING_OURS["app"], "targetNamespaces": ["team-a", "team-b"]}}
    out = converged_with_world("existing", running(trust_manager(values)))
    assert "gateway-ca-bundle" not in out.resources
    (refused,) = [r for r in out.results if r.reason == "AdoptionRefused"]
    assert "--target-namespaces=team-a,team-b" in refused.message
    assert "add modelplane-system to its app.targetNamespaces" in refused.message
    values["app"]["targetNamespaces"].append("modelplane-system")
    out = converged_with_world("existing", running(trust_manager(values)))
    assert "gateway-ca-bundle" in out.resources
    assert "release-trust-manager" not in out.resources


def test_two_trust_managers_are_refused_whichever_comes_first():
    """Bundles are cluster-scoped: every trust-manager reconciles the function's, and one reading
    another namespace would keep calling it unsynced."""
    ours_too = trust_manager(TRUSTING_OURS)
    other = trust_manager({}, release="team-trust", namespace="team")
    out = converged_with_world("existing", running(ours_too, other))
    assert "release-trust-manager" not in out.resources
    assert "gateway-ca-bundle" not in out.resources
    (refused,) = [r for r in out.results if r.reason == "AdoptionRefused"]
    assert "2 run (Deployment platform/trust-manager, Deployment team/trust-manager)" in (
        refused.message
    )


def test_a_trust_manager_scaled_to_zero_is_waited_for():
    found = trust_manager(TRUSTING_OURS, replicas=0)
    out = converged_with_world("existing", running(found))
    assert "release-trust-manager" not in out.resources
    assert "gateway-ca-bundle" not in out.resources
    assert "trust-manager" in condition(out, "BackendReady").message


@pytest.mark.parametrize(
    ("line", "value"),
    [
        (["--trust-namespace=modelplane-system"], "modelplane-system"),
        (["--log-level=1", "--trust-namespace", "modelplane-system"], "modelplane-system"),
        (["--trust-namespace"], None),
        # A patch appending the flag wins, as Go's flag parsers keep the last.
        (
            ["--trust-namespace=cert-manager", "--trust-namespace=modelplane-system"],
            "modelplane-system",
        ),
        ([], None),
    ],
)
def test_a_flag_is_read_in_either_form(line, value):
    workload = {"spec": {"template": {"spec": {"containers": [{"name": "c", "args": line}]}}}}
    assert adoption._flag(workload, "--trust-namespace") == value


def device_plugin(name: str, labels: dict, scheduled: int, namespace: str = "gpu-operator") -> dict:
    """A GPU device plugin's DaemonSet (or another of its release's), scheduled on that many
    nodes."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "status": {"desiredNumberScheduled": scheduled, "numberReady": scheduled},
    }


# gpu-operator assets/state-device-plugin/0500_daemonset.yaml; k8s-device-plugin's chart labels.
GPU_OPERATOR_PLUGIN = {"app": "nvidia-device-plugin-daemonset"}
CHART_PLUGIN = {
    "app.kubernetes.io/name": "nvidia-device-plugin",
    "app.kubernetes.io/instance": "nvdp",
}


def test_a_gpu_device_plugin_running_holds_the_dra_driver_and_says_how_to_turn_it_off():
    plugin = device_plugin("nvidia-device-plugin-daemonset", GPU_OPERATOR_PLUGIN, 4)
    out = converged_with_world("existing", running(plugin))
    assert "release-nvidia-dra-driver" not in out.resources
    assert gpus.NAMESPACE_KEY not in out.resources  # what comes after the driver waits
    (warning,) = [r for r in out.results if r.reason == "ConflictingComponent"]
    assert "gpu-operator/nvidia-device-plugin-daemonset (4 nodes)" in warning.message
    assert "nvidia.com/gpu.deploy.device-plugin=false" in warning.message
    backend = condition(out, "BackendReady")
    assert backend.status is False and "GPU Operator's device plugin runs beside" in backend.message
    collection = out.resources["detect-gpu-operator-device-plugin"].body
    assert collection["spec"]["observeObjects"]["selector"] == {"matchLabels": GPU_OPERATOR_PLUGIN}


def test_a_device_plugin_kept_off_every_node_and_its_releases_other_daemon_sets_hold_nothing():
    world = running(
        device_plugin("nvidia-device-plugin-daemonset", GPU_OPERATOR_PLUGIN, 0),
        device_plugin("nvdp-nvidia-device-plugin-gpu-feature-discovery", CHART_PLUGIN, 4, "nvdp"),
        device_plugin("nvdp-nvidia-device-plugin-mps-control-daemon", CHART_PLUGIN, 4, "nvdp"),
    )
    out = converged_with_world("existing", world)
    assert "release-nvidia-dra-driver" in out.resources
    assert not [r for r in out.results if r.reason == "ConflictingComponent"]
    assert condition(out, "BackendReady").status is True


def test_the_dra_driver_is_installed_once_the_device_plugin_is_turned_off_and_stays():
    xr, classes = example("existing")
    plugin = device_plugin("nvdp-nvidia-device-plugin", CHART_PLUGIN, 2, "nvdp")
    held = converged_with_world("existing", running(plugin))
    (warning,) = [r for r in held.results if r.reason == "ConflictingComponent"]
    assert "nvdp/nvdp-nvidia-device-plugin (2 nodes)" in warning.message
    off = running(device_plugin("nvdp-nvidia-device-plugin", CHART_PLUGIN, 0, "nvdp"))
    out = held
    for _ in range(6):
        out = compose_cluster(
            xr, sim.answered(required(classes), out, off), sim.reported(out, off), SCHEMAS
        )
    assert "release-nvidia-dra-driver" in out.resources
    # A device plugin turned on again later removes nothing: the release is the function's.
    on = running(plugin)
    again = compose_cluster(
        xr, sim.answered(required(classes), out, on), sim.reported(out, on), SCHEMAS
    )
    assert out.resources.keys() <= again.resources.keys()
    assert not [r for r in again.results if r.reason == "ConflictingComponent"]


def converged_with_world(source: str, world: World) -> object:
    xr, classes = example(source)
    return sim.converge(xr, required(classes), world, SCHEMAS, every_result=True)


@pytest.mark.parametrize(
    "status",
    [None, "weird", {"desiredNumberScheduled": True}, {"desiredNumberScheduled": "4"}],
)
def test_a_device_plugin_not_counted_yet_holds_the_driver_and_says_what_stands_there(status):
    """No status yet (the DaemonSet controller has not written it) or something other than a
    count: not known to be off, so the install waits, saying what it read; never a crash."""
    plugin = device_plugin("nvidia-device-plugin-daemonset", GPU_OPERATOR_PLUGIN, 0)
    plugin["status"] = status
    out = converged_with_world("existing", running(plugin))
    assert "release-nvidia-dra-driver" not in out.resources
    backend = condition(out, "BackendReady").message
    assert (
        "DaemonSet gpu-operator/nvidia-device-plugin-daemonset: status.desiredNumberScheduled is"
        in backend
    )


def test_an_adopted_dra_driver_is_not_guarded_against_device_plugins():
    """The device plugin is the adopted driver's operator's business: nothing is listed."""
    name = adoption.DETECTORS["nvidia-dra-driver"].name
    plugin = device_plugin("nvidia-device-plugin-daemonset", GPU_OPERATOR_PLUGIN, 4)
    xr, classes = example("existing")
    world = World(detected={name: installed("nvidia-dra-driver", "gpu-operator")}, running=[plugin])
    out = sim.converge(xr, required(classes), world, SCHEMAS)
    guards = {c.key for c in conflicts.CONFLICTS["nvidia-dra-driver"]}
    assert not guards & out.resources.keys()
    assert not [k for k in out.requirements if k.removesuffix("-found") in guards]
    assert not [r for r in out.results if r.reason == "ConflictingComponent"]


def test_an_adopted_driver_stays_adopted_while_the_cluster_cannot_be_reached():
    name = adoption.DETECTORS["nvidia-dra-driver"].name
    xr, classes = example("existing")
    world = World(detected={name: installed("nvidia-dra-driver", "gpu-operator")})
    out = sim.converge(xr, required(classes), world, SCHEMAS)
    observed = sim.reported(out, world)
    for key in PROVIDER_CONFIG_KEYS:
        del observed.resources[key]
    lost = compose_cluster(xr, sim.answered(required(classes), out, world), observed, SCHEMAS)
    assert "release-nvidia-dra-driver" not in lost.resources
    assert "dra-driver-namespace" not in lost.resources
    assert "release-nvidia-dra-driver" not in condition(lost, "BackendReady").message
    assert (out.resources.keys() - set(PROVIDER_CONFIG_KEYS)) <= lost.resources.keys()


@pytest.mark.parametrize("example_name", ["existing-converged", "gke-converged"])
def test_the_functions_namespace_on_an_existing_cluster_outlives_the_xr(example_name):
    """On a cluster someone else runs, modelplane-system may be there first, holding what is not
    the function's (a trust-manager's Role for its trust namespace, or the whole release): the
    function takes it up but never deletes it. On a cluster it provisions it is the function's.
    Read in the reviewed golden files of the converged examples."""
    (namespace,) = [
        d
        for d in yaml.safe_load_all((GOLDEN / f"{example_name}.yaml").read_text())
        if d
        and (d["metadata"].get("annotations") or {}).get("crossplane.io/composition-resource-name")
        == "gateway-namespace"
    ]
    policies = namespace["spec"].get("managementPolicies")
    if example_name.startswith("existing"):
        assert policies == ["Observe", "Create", "Update", "LateInitialize"]
    else:
        assert policies is None


def test_an_envoy_gateway_already_there_is_refused_and_the_rest_of_the_stack_goes_on():
    """Upstream's own install (release eg in envoy-gateway-system): it lacks the AI Gateway's
    extension manager, and the function's release beside it would collide with its objects."""
    found = deployment_of("envoy-gateway", {}, 1, "eg", "envoy-gateway-system")
    out = converged_with_world("existing", running(found))
    made_for_the_functions = {
        "release-envoy-gateway",
        "envoy-gateway-inferencepool-reader",
        "envoy-gateway-inferencepool-reader-binding",
        "release-ai-gateway",
        "release-ai-gateway-crds",
        "gateway-class",
    }
    assert not made_for_the_functions & out.resources.keys()
    assert {"release-node-feature-discovery", "release-nvidia-dra-driver"} <= out.resources.keys()
    (refused,) = [r for r in out.results if r.reason == "AdoptionRefused"]
    assert refused.message.startswith(
        "envoy-gateway: Helm release envoy-gateway-system/eg (v1.8.3) runs already (Deployment "
        "envoy-gateway-system/envoy-gateway), and the function can neither adopt it"
    )
    backend = condition(out, "BackendReady")
    assert backend.status is False
    assert "Envoy AI Gateway as its extension manager" in refused.message
    assert "Envoy AI Gateway" in backend.message  # the Warning says it whole


def test_the_functions_own_envoy_gateway_found_again_is_installed_over_again():
    own = deployment_of("envoy-gateway", {}, 1, "mp-envoy-gateway", "envoy-gateway-system")
    out = converged_with_world("existing", running(own))
    assert "release-envoy-gateway" in out.resources
    assert condition(out, "BackendReady").status is True


# Gateway API CRDs someone else owns (function/serving/gateway_api.py).
def gateway_api_world(version: str, channel: str, annotations: dict | None = None) -> World:
    return World(detected={gateway_api.SOUGHT.name: gateway_api_crd(version, channel, annotations)})


MADE_FOR_THE_GATEWAY = {"release-envoy-gateway", "release-ai-gateway", "gateway-class"}


def test_the_bundle_envoy_gateway_carries_found_installed_by_another_is_installed_over():
    """The same bundle: Helm's server-side apply of crds/ changes nothing on it."""
    out = converged_with_world("existing", gateway_api_world(*GATEWAY_API_BUNDLE))
    assert out.resources.keys() >= MADE_FOR_THE_GATEWAY
    assert gateway_api.KEY in out.resources
    assert not [r for r in out.results if r.reason == gateway_api.REASON]
    assert condition(out, "BackendReady").status is True


@pytest.mark.parametrize(
    ("version", "channel", "said"),
    [
        ("v1.2.1", "standard", "v1.2.1, standard channel, older than the v1.5"),
        ("v1.5.1", "standard", "v1.5.1, standard channel (CustomResourceDefinition"),
        ("v1.6.0", "experimental", "v1.6.0, experimental channel (CustomResourceDefinition"),
        (None, None, "of no bundle version, no channel, older than the v1.5"),
    ],
)
def test_another_owner_s_other_gateway_api_bundle_holds_the_gateway_and_is_named(
    version, channel, said
):
    """Another bundle (GKE's, Istio's, a GitOps repository's): Helm would apply the chart's over
    it and fail on its owner's fields; nothing is applied, the Warning says what is there and
    what to change, the rest of the stack goes on."""
    annotations = {
        "meta.helm.sh/release-name": "gateway-api",
        "meta.helm.sh/release-namespace": "platform",
    }
    crd = gateway_api_crd(version or "", channel or "", annotations)
    crd["metadata"]["annotations"] = {k: v for k, v in crd["metadata"]["annotations"].items() if v}
    out = converged_with_world("existing", World(detected={gateway_api.SOUGHT.name: crd}))
    assert not MADE_FOR_THE_GATEWAY & out.resources.keys()
    assert {"release-node-feature-discovery", "release-nvidia-dra-driver"} <= out.resources.keys()
    (warning,) = {r.message for r in out.results if r.reason == gateway_api.REASON}
    assert warning.startswith(f"envoy-gateway: the cluster's Gateway API CRDs are {said}")
    assert "Helm release platform/gateway-api" in warning
    assert "move them to v1.5.1 (experimental channel)" in warning
    backend = condition(out, "BackendReady")
    assert backend.status is False
    assert said in backend.message


def test_the_gateway_api_crds_are_looked_at_only_before_envoy_gateway_is_installed():
    """Once the function's release is there, the CRDs are its own: whatever the detector says
    later changes nothing, and the detector stays as composed."""
    xr, classes = example("existing")
    out = sim.converge(xr, required(classes), World(), SCHEMAS)
    assert "release-envoy-gateway" in out.resources
    world = gateway_api_world("v1.2.1", "standard")
    again = out
    for _ in range(3):
        given = sim.answered(required(classes), again, world)
        again = compose_cluster(xr, given, sim.reported(again, world), SCHEMAS)
        assert again.resources.keys() == out.resources.keys()
        assert again.resources[gateway_api.KEY].body == out.resources[gateway_api.KEY].body
        assert not [r for r in again.results if r.reason == gateway_api.REASON]


@pytest.mark.parametrize("example_name", ["existing", "eks"])
def test_the_safe_upgrade_policy_is_left_out_only_on_clusters_someone_else_runs(example_name):
    """gateway-helm v1.8.3's cluster-wide policy refuses older or standard-channel Gateway API
    CRDs: on a cluster someone else runs it would lock their owner out (rendered by the real
    Helm)."""
    xr, classes = example(example_name)
    out = sim.converge(xr, required(classes), World(), SCHEMAS)
    values = out.resources["release-envoy-gateway"].body["spec"]["forProvider"]["values"]
    chart = CHARTS["envoy-gateway"]
    rendered = _template(
        chart_path(chart.name, chart.version),
        "mp-envoy-gateway",
        chart.namespace,
        json.dumps(values, sort_keys=True),
        helm_bin(),
        False,
    )
    policies = [m for m in rendered if m["kind"] == "ValidatingAdmissionPolicy"]
    assert bool(policies) is (example_name != "existing")
