"""The serving stack: the component table, its gating, the gateway's trust chain and status."""

import copy

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from function import kube, serving
from function.clusters.base import as_desired
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.serving import GATEWAY_SCHEMA, GATEWAYS, gateway
from function.serving.components import (
    CHART_OF_CRD,
    COMPONENTS,
    DYNAMO,
    KAI_BUDGETED,
    STANDARD,
)
from tests.builders import all_classes, example, provider_configs
from tests.sim.providers import World
from tests.sim.workload import CLUSTER_CA, FLEET_GATEWAY_CA, inference_gateway
from tests.unit import sim
from tests.unit.sim import reported

COMPONENTS_BY_KEY = {c.key: c for c in COMPONENTS}
INSTALLED = {GATEWAY_SCHEMA: True}
NOT_INSTALLED = {GATEWAY_SCHEMA: False}
OTHER_CA = CLUSTER_CA  # any other public certificate


def required(classes: list[dict], gateways: list[dict] | None) -> dict[str, list[dict]]:
    out = all_classes(classes)
    if gateways is not None:
        out[GATEWAYS] = copy.deepcopy(gateways)
    return out


def existing(stack: str = "Standard") -> tuple[dict, list[dict]]:
    xr, classes = example("existing")
    xr["spec"]["stack"] = stack
    return xr, classes


def converged(gateways=None, schemas=INSTALLED, stack="Standard", world=None):
    xr, classes = existing(stack)
    gateways = [inference_gateway("fleet-a")] if gateways is None else gateways
    out = sim.converge(xr, required(classes, gateways), world, schemas)
    return xr, classes, out


def condition(out, type_):
    return next(c for c in out.conditions if c.type == type_)


# --- the table ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", [STANDARD, DYNAMO])
def test_every_dependency_exists_in_the_same_stack_and_comes_first(stack):
    seen: set[str] = set()
    for component in COMPONENTS:
        if stack not in component.stacks:
            continue
        missing = [d for d in component.after if d not in seen]
        assert not missing, f"{component.key} comes after {missing}, defined later or elsewhere"
        seen.add(component.key)


def test_component_keys_are_unique():
    keys = [c.resource_key for c in COMPONENTS]
    assert len(keys) == len(set(keys))


# --- gating ---------------------------------------------------------------------------------------


def test_nothing_goes_on_the_cluster_before_its_provider_configs_are_observed():
    xr, classes = existing()
    out = compose_cluster(xr, required(classes, []), sim.Observed(), INSTALLED)
    assert sorted(out.resources) == ["provider-config-helm", "provider-config-kubernetes"]
    backend = condition(out, "BackendReady")
    assert (backend.status, backend.reason) == (False, "WaitingForCluster")
    assert out.ready is False


def test_a_component_waits_for_what_it_needs_and_is_then_never_dropped():
    xr, classes = existing()
    req = required(classes, [inference_gateway("fleet-a")])
    first = compose_cluster(xr, req, sim.Observed(), INSTALLED)
    second = compose_cluster(xr, req, reported(first), INSTALLED)
    # An Existing cluster is first looked at for a cert-manager of its own: none here.
    second = compose_cluster(xr, req, reported(second), INSTALLED)
    assert "release-cert-manager" in second.resources
    assert "gateway-selfsigned-issuer" not in second.resources  # cert-manager not Ready yet
    message = condition(second, "BackendReady").message
    assert message.startswith("waiting for ") and "gateway-ca-certificate" not in second.resources
    _, _, out = converged()
    # cert-manager loses Ready: what came after it stays, unchanged.
    lost = compose_cluster(xr, req, reported(out, drop_status=("release-cert-manager",)), INSTALLED)
    assert set(lost.resources) == set(out.resources)
    for key, desired in out.resources.items():
        assert lost.resources[key].body == desired.body, key


def test_converged_stack_publishes_the_gateway():
    xr, _, out = converged()
    assert out.ready is None  # Crossplane derives it: every composed resource is Ready
    backend = condition(out, "BackendReady")
    assert (backend.status, backend.reason) == (True, "Available")
    assert out.status["gateway"] == {
        "address": "203.0.113.10",
        "caCertificate": CLUSTER_CA,
        "hostname": gateway.hostname(xr["metadata"]["name"]),
    }
    host = out.status["gateway"]["hostname"]
    assert host.endswith(".modelplane-system.svc.cluster.local") and len(host.split(".")[0]) <= 63
    listener = out.resources["gateway"].body["spec"]["forProvider"]["manifest"]["spec"]["listeners"]
    assert [(x["protocol"], x["port"], x["hostname"]) for x in listener] == [("HTTPS", 443, host)]
    cert = out.resources["gateway-serving-certificate"].body["spec"]["forProvider"]["manifest"]
    assert cert["spec"]["dnsNames"] == [host]


def test_the_gateway_comes_once_the_ai_gateway_is_ready_so_its_proxies_get_the_sidecar():
    xr, classes, out = converged()
    req = required(classes, [inference_gateway("fleet-a")])
    observed = reported(out)
    del observed.resources["gateway"]
    ai = observed.resources["release-ai-gateway"].body
    ai["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Creating"}]
    waiting = compose_cluster(xr, req, observed, INSTALLED)
    assert "gateway" not in waiting.resources
    ai["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Available"}]
    assert "gateway" in compose_cluster(xr, req, observed, INSTALLED).resources


def test_the_hostname_waits_for_the_policy_that_demands_client_certificates():
    xr, classes, out = converged()
    req = required(classes, [inference_gateway("fleet-a")])
    observed = reported(out)
    observed = Observed(
        resources=observed.resources,
        status={k: v for k, v in observed.status.items() if k != "gateway"},
    )
    policy = observed.resources["gateway-client-auth"].body
    policy["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Creating"}]
    unenforced = compose_cluster(xr, req, observed, INSTALLED)
    assert unenforced.status["gateway"]["address"] == "203.0.113.10"
    assert "hostname" not in unenforced.status["gateway"]
    policy["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Available"}]
    enforced = compose_cluster(xr, req, observed, INSTALLED)
    assert enforced.status["gateway"]["hostname"] == gateway.hostname(xr["metadata"]["name"])
    # Once published it stays while the policy's status is lost for a moment.
    observed = Observed(resources=observed.resources, status=enforced.status)
    policy["status"]["conditions"] = []
    kept = compose_cluster(xr, req, observed, INSTALLED)
    assert kept.status["gateway"]["hostname"] == enforced.status["gateway"]["hostname"]


def test_without_inference_gateways_the_gateway_stays_closed_and_the_hostname_withheld():
    for schemas, gateways in ((NOT_INSTALLED, []), (INSTALLED, [])):
        _, _, out = converged(gateways=gateways, schemas=schemas)
        assert "gateway" not in out.resources
        assert "gateway-client-auth" not in out.resources
        assert "hostname" not in out.status.get("gateway", {})
        assert out.status["gateway"]["caCertificate"] == CLUSTER_CA
        backend = condition(out, "BackendReady")
        assert (backend.status, backend.reason) == (False, "WaitingForClients")
        # The installed stack is the whole stack: the XR is Ready, closed to clients.
        assert out.ready is None


def test_the_gateways_are_asked_for_only_once_their_kind_is_known_installed():
    xr, classes = existing()
    unknown = compose_cluster(xr, all_classes(classes), sim.Observed(), {})
    assert "inference-gateways" not in unknown.requirements
    assert unknown.schemas[GATEWAY_SCHEMA].kind == "InferenceGateway"
    absent = compose_cluster(xr, all_classes(classes), sim.Observed(), NOT_INSTALLED)
    assert "inference-gateways" not in absent.requirements
    present = compose_cluster(xr, all_classes(classes), sim.Observed(), INSTALLED)
    want = present.requirements["inference-gateways"]
    assert (want.api_version, want.kind, want.name) == (
        "modelplane.ai/v1alpha1",
        "InferenceGateway",
        None,
    )


def test_client_cas_are_sorted_by_name_and_changes_reach_only_their_configmap():
    gateways = [
        inference_gateway("zeta", ca=OTHER_CA),
        inference_gateway("alpha", ca=FLEET_GATEWAY_CA),
    ]
    xr, classes, out = converged(gateways=gateways)
    data = out.resources["gateway-client-cas"].body["spec"]["forProvider"]["manifest"]["data"]
    assert data["ca.crt"] == FLEET_GATEWAY_CA + OTHER_CA
    # zeta's CA goes away: the client CA ConfigMap changes, nothing else does.
    after = compose_cluster(xr, required(classes, gateways[1:]), reported(out), INSTALLED)
    changed = {k for k in out.resources if after.resources[k].body != out.resources[k].body}
    assert changed == {"gateway-client-cas"}
    data = after.resources["gateway-client-cas"].body["spec"]["forProvider"]["manifest"]["data"]
    assert data["ca.crt"] == FLEET_GATEWAY_CA


def test_a_new_cluster_ca_reaches_the_status():
    xr, classes, out = converged()
    observed = reported(out)
    ca_map = observed.resources["gateway-ca-configmap"].body
    ca_map["status"]["atProvider"]["manifest"]["data"]["ca.crt"] = OTHER_CA.replace(
        "CERTIFICATE-----\n", "CERTIFICATE-----\nMIIB\n", 1
    )
    after = compose_cluster(
        xr, required(classes, [inference_gateway("fleet-a")]), observed, INSTALLED
    )
    assert after.status["gateway"]["caCertificate"].startswith(
        "-----BEGIN CERTIFICATE-----\nMIIB\n"
    )


def test_the_gateway_ca_keeps_its_key_when_renewed_and_the_xr_says_it_changed():
    """The Bundle publishes only the renewed CA while the serving certificate is still signed
    by the one before: the same key keeps that chain whole. A CA that changes is said once, as
    an event naming both fingerprints; an unchanged one says nothing."""
    xr, classes, out = converged()
    ca = out.resources["gateway-ca-certificate"].body["spec"]["forProvider"]["manifest"]
    serving = out.resources["gateway-serving-certificate"].body["spec"]["forProvider"]["manifest"]
    assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    assert serving["spec"]["privateKey"]["rotationPolicy"] == "Always"
    assert not [r for r in out.results if r.reason == "GatewayCAChanged"]

    observed = reported(out)
    cm = observed.resources["gateway-ca-configmap"].body["status"]["atProvider"]["manifest"]
    assert out.status["gateway"]["caCertificate"] == cm["data"]["ca.crt"]
    cm["data"]["ca.crt"] = FLEET_GATEWAY_CA  # another real certificate: the CA renewed
    after = compose_cluster(
        xr, required(classes, [inference_gateway("fleet-a")]), observed, INSTALLED
    )
    [changed] = [r for r in after.results if r.reason == "GatewayCAChanged"]
    assert changed.severity == "Normal"
    before, now = gateway.fingerprint(CLUSTER_CA), gateway.fingerprint(FLEET_GATEWAY_CA)
    assert before != now
    assert f"({before}... -> {now}...)" in changed.message
    assert after.status["gateway"]["caCertificate"] == FLEET_GATEWAY_CA
    # Once the status carries it, nothing more is said.
    again = compose_cluster(
        xr,
        required(classes, [inference_gateway("fleet-a")]),
        sim.Observed(resources=observed.resources, status=after.status),
        INSTALLED,
    )
    assert not [r for r in again.results if r.reason == "GatewayCAChanged"]


def test_the_fingerprint_is_the_certificates_sha256():
    cert = x509.load_pem_x509_certificate(CLUSTER_CA.encode())
    digest = cert.fingerprint(hashes.SHA256()).hex().upper()
    assert gateway.fingerprint(CLUSTER_CA).replace(":", "") == digest[:16]


def test_the_gateway_and_the_webhook_its_proxies_need_survive_a_drain():
    """Two Envoy proxies and two AI Gateway controllers (whose fail-closed webhook every new
    proxy pod needs), spread over nodes and zones as far as the nodes allow, each under a
    budget that lets a drain evict one at a time."""
    _, _, out = converged()
    proxy = out.resources["gateway-proxy"].body["spec"]["forProvider"]["manifest"]
    kubernetes = proxy["spec"]["provider"]["kubernetes"]
    assert kubernetes["envoyDeployment"]["replicas"] == 2
    assert kubernetes["envoyPDB"] == {"maxUnavailable": 1}
    spread = kubernetes["envoyDeployment"]["pod"]["topologySpreadConstraints"]
    assert [s["topologyKey"] for s in spread] == [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]
    assert all(s["whenUnsatisfiable"] == "ScheduleAnyway" for s in spread)
    assert all(s["labelSelector"]["matchLabels"] == gateway.PROXY_POD_LABELS for s in spread)
    ai = out.resources["release-ai-gateway"].body["spec"]["forProvider"]["values"]["controller"]
    assert ai["replicaCount"] == 2
    assert ai["podDisruptionBudget"] == {"enabled": True, "maxUnavailable": 1}


def test_the_ai_gateway_webhook_certificate_comes_from_cert_manager():
    by_key = {c.key: c for c in COMPONENTS}
    assert "cert-manager" in by_key["ai-gateway"].after
    _, _, out = converged()
    values = out.resources["release-ai-gateway"].body["spec"]["forProvider"]["values"]
    webhook = values["controller"]["mutatingWebhook"]
    assert webhook["certManager"] == {"enable": True}
    # Not the chart's default name, which the old release's Secret has.
    assert webhook["tlsCertSecretName"] == "mp-ai-gateway-webhook-tls"


@pytest.mark.parametrize("source", ["existing", "eks"])
def test_privileged_node_agents_get_a_namespace_that_admits_them(source):
    """NFD's worker mounts host paths and the DRA kubelet plugin runs privileged: their
    namespaces say so to Pod Security admission, made before their releases; the GPU probes
    need no more than baseline. On a cluster someone else runs, NFD's namespace is taken up,
    never deleted."""
    xr, classes = example(source)
    out = sim.converge(xr, required(classes, [inference_gateway("fleet-a")]), None, INSTALLED)
    privileged = {"pod-security.kubernetes.io/enforce": "privileged"}
    for key, name in (
        ("nfd-namespace", "node-feature-discovery"),
        ("dra-driver-namespace", "nvidia-dra-driver"),
    ):
        manifest = out.resources[key].body["spec"]["forProvider"]["manifest"]
        assert manifest["metadata"] == {"name": name, "labels": privileged}
    by_key = {c.key: c for c in COMPONENTS}
    assert "nfd-namespace" in by_key["node-feature-discovery"].after
    policies = out.resources["nfd-namespace"].body["spec"].get("managementPolicies")
    if source == "existing":
        assert policies == ["Observe", "Create", "Update", "LateInitialize"]
    else:
        assert policies is None


def test_no_secret_is_observed_and_no_private_key_reaches_the_status():
    xr, classes, out = converged()
    for desired in out.resources.values():
        manifest = desired.body["spec"].get("forProvider", {}).get("manifest", {})
        assert manifest.get("kind") != "Secret"
    # A ConfigMap that (wrongly) carries a key is never published.
    observed = reported(out)
    cm = observed.resources["gateway-ca-configmap"].body["status"]["atProvider"]["manifest"]
    cm["data"]["ca.crt"] = (
        CLUSTER_CA + "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"
    )
    fresh = sim.Observed(resources=observed.resources, status={})
    after = compose_cluster(xr, required(classes, [inference_gateway("fleet-a")]), fresh, INSTALLED)
    assert "caCertificate" not in after.status.get("gateway", {})
    assert "PRIVATE KEY" not in str(after.status)


@pytest.mark.parametrize("lost", ["gateway-ca-configmap", "gateway"])
def test_a_vanished_observation_removes_nothing_and_keeps_the_published_status(lost):
    xr, classes, out = converged()
    after = compose_cluster(
        xr,
        required(classes, [inference_gateway("fleet-a")]),
        reported(out, drop_status=(lost,)),
        INSTALLED,
    )
    assert set(after.resources) == set(out.resources)
    assert after.status["gateway"] == out.status["gateway"]


def test_stacks_differ_only_in_their_own_components():
    _, _, standard = converged(stack="Standard")
    _, _, dynamo = converged(stack="Dynamo")
    assert "release-leader-worker-set" in standard.resources
    assert "release-leader-worker-set" not in dynamo.resources
    dynamo_only = {
        k for k in set(dynamo.resources) - set(standard.resources) if not k.startswith("usage-")
    }
    assert dynamo_only == {
        # The example is Existing: Grove and KAI are looked for before they are installed.
        "detect-grove",
        "detect-kai-scheduler",
        "release-grove",
        "grove-disruption-budget",
        "release-kai-scheduler",
        *(f"kai-disruption-budget-{app}" for app in KAI_BUDGETED),
        "kai-queue-root",
        "kai-queue",
        "modelexpress-crd-modelmetadatas",
        "modelexpress-crd-modelcacheentries",
        # A new cluster gets the server in its own namespace, and nothing in `default`.
        "modelexpress-namespace",
        "modelexpress-serviceaccount",
        "modelexpress-role",
        "modelexpress-rolebinding",
        "modelexpress-service",
        "modelexpress-deployment",
    }
    queue = dynamo.resources["kai-queue"].body["spec"]["forProvider"]["manifest"]
    assert queue["spec"]["parentQueue"] == "modelplane-root"


def test_the_dra_driver_gets_the_driver_root_of_its_cloud():
    out = sim.converge(*_gke())
    values = out.resources["release-nvidia-dra-driver"].body["spec"]["forProvider"]["values"]
    assert values["nvidiaDriverRoot"] == "/home/kubernetes/bin/nvidia"
    assert values["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
    _, _, out = converged()
    values = out.resources["release-nvidia-dra-driver"].body["spec"]["forProvider"]["values"]
    assert "nvidiaDriverRoot" not in values


def _gke():
    xr, classes = example("gke")
    req = all_classes(classes)
    req["cloud-provider-config"] = provider_configs("gke")
    return xr, req, World(), NOT_INSTALLED


# --- what the real charts need (tests/test_charts.py renders them) --------------------------------


DRA_RELEASE = "release-nvidia-dra-driver"


def test_every_release_retries_and_the_dra_driver_rolls_back_only_within_the_maintained_line():
    """provider-helm uninstalls a failed first install and installs again, and rolls a failed or
    pending upgrade back, only under rollbackLimit. NVIDIA's DRA driver (25.12.0) cannot read the
    checkpoint the maintained line (0.4.x) wrote: the DRA release has rollbackLimit only while no
    rollback can return to NVIDIA's line."""
    xr, classes, out = converged()
    releases = {k: d.body for k, d in out.resources.items() if d.body["kind"] == "Release"}
    assert releases[DRA_RELEASE]["spec"]["forProvider"]["chart"]["version"].startswith("0.")
    for release in releases.values():
        assert release["spec"]["rollbackLimit"] == kube.RELEASE_RETRIES, release["metadata"]

    def dra_after(
        state: str | None, revision: int, retries: bool = True, version: str | None = "0.4.1"
    ) -> dict:
        """The DRA release composed after one observed in state at revision, its last revision
        of chart version (None: no status), composed with or without retries."""
        observed = reported(out)
        body = copy.deepcopy(observed.resources[DRA_RELEASE].body)
        if retries:
            body["spec"]["rollbackLimit"] = kube.RELEASE_RETRIES
        else:
            body["spec"].pop("rollbackLimit", None)
        if state is None:
            del body["status"]
        else:
            body["status"]["atProvider"] |= {
                "state": state,
                "revision": float(revision),
                "version": version,
            }
        observed.resources[DRA_RELEASE] = ObservedResource(body)
        again = compose_cluster(xr, required(classes, [inference_gateway("fleet-a")]), observed)
        return again.resources[DRA_RELEASE].body["spec"]

    # A first install that failed is retried as every release's.
    assert dra_after("failed", 1)["rollbackLimit"] == kube.RELEASE_RETRIES
    assert dra_after("pending-install", 1)["rollbackLimit"] == kube.RELEASE_RETRIES
    assert dra_after(None, 1)["rollbackLimit"] == kube.RELEASE_RETRIES
    # Deployed on the maintained line: a later upgrade that fails or is left pending (a provider
    # restart) rolls back to that revision.
    assert dra_after("deployed", 1)["rollbackLimit"] == kube.RELEASE_RETRIES
    assert dra_after("deployed", 4, retries=False)["rollbackLimit"] == kube.RELEASE_RETRIES
    assert dra_after("failed", 5)["rollbackLimit"] == kube.RELEASE_RETRIES
    assert dra_after("pending-upgrade", 5)["rollbackLimit"] == kube.RELEASE_RETRIES
    assert dra_after("deployed", 3, version="0.4.9")["rollbackLimit"] == kube.RELEASE_RETRIES
    # Another minor of it: its checkpoint may not read back in 0.4 (0.4.1 validates it by
    # re-encoding), so none until the range is widened deliberately.
    assert "rollbackLimit" not in dra_after("deployed", 3, version="0.5.0")
    # Still on NVIDIA's line, or its upgrade to the maintained line failed or hangs: the revision
    # before is 25.12.0, so no rollback (the function's own upgrade drops the limit with it).
    assert "rollbackLimit" not in dra_after("deployed", 3, version="25.12.0")
    assert "rollbackLimit" not in dra_after("failed", 4, retries=False)
    assert "rollbackLimit" not in dra_after("pending-upgrade", 4, retries=False)
    assert "rollbackLimit" not in dra_after("failed", 2, version="25.12.0")
    # Not known which line the release is on (a status without a version): none.
    assert "rollbackLimit" not in dra_after("deployed", 3, retries=False, version=None)


def test_envoy_gateway_installs_after_the_inferencepool_crd_and_its_grant_to_read_them():
    by_key = {c.key: c for c in COMPONENTS}
    assert set(by_key["envoy-gateway"].after) == {
        "gaie-crd-inferencepools",
        "envoy-gateway-inferencepool-reader-binding",
    }
    _, _, out = converged()
    role = out.resources["envoy-gateway-inferencepool-reader"].body["spec"]["forProvider"]
    binding = out.resources["envoy-gateway-inferencepool-reader-binding"].body["spec"]
    assert role["manifest"]["rules"] == [
        {
            "apiGroups": ["inference.networking.k8s.io"],
            "resources": ["inferencepools"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert binding["forProvider"]["manifest"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "envoy-gateway", "namespace": "envoy-gateway-system"}
    ]


def test_trust_manager_installs_once_its_trust_namespace_exists():
    by_key = {c.key: c for c in COMPONENTS}
    assert "gateway-namespace" in by_key["trust-manager"].after
    _, _, out = converged()
    values = out.resources["release-trust-manager"].body["spec"]["forProvider"]["values"]
    namespace = out.resources["gateway-namespace"].body["spec"]["forProvider"]["manifest"]
    assert values["app"]["trust"]["namespace"] == namespace["metadata"]["name"]


def test_nfd_labels_gpus_by_vendor_and_grove_gangs_through_kai():
    _, _, standard = converged()
    nfd = standard.resources["release-node-feature-discovery"].body["spec"]["forProvider"]
    assert nfd["values"]["worker"]["config"]["sources"]["pci"]["deviceLabelFields"] == ["vendor"]
    _, _, dynamo = converged(stack=DYNAMO)
    grove = dynamo.resources["release-grove"].body["spec"]["forProvider"]["values"]
    assert grove["config"]["scheduler"]["defaultProfileName"] == "kai-scheduler"
    assert "release-kai-scheduler" in dynamo.resources


NFD_CRDS = ("nfd-crd-nodefeatures", "nfd-crd-nodefeaturegroups", "nfd-crd-nodefeaturerules")
NFD_RELEASE = "release-node-feature-discovery"


def test_nfd_s_crds_are_the_function_s_to_move_and_its_release_skips_them():
    """Helm installs crds/ once and never upgrades them: applied as Objects, marked with the
    chart's version, they move with the chart; Grove's own installer moves its CRDs."""
    _, _, out = converged()
    crds = {k: out.resources[k].body["spec"]["forProvider"]["manifest"] for k in NFD_CRDS}
    assert {m["kind"] for m in crds.values()} == {"CustomResourceDefinition"}
    assert {m["metadata"]["annotations"][CHART_OF_CRD] for m in crds.values()} == {
        "node-feature-discovery-0.18.3"
    }
    for key in NFD_CRDS:
        spec = out.resources[key].body["spec"]
        # Never deleted through their Objects: every NodeFeature would go with them.
        assert "Delete" not in spec["managementPolicies"]
        # Ready means the function's CRD is there, not merely one of that name.
        assert "node-feature-discovery-0.18.3" in spec["readiness"]["celQuery"]
    release = out.resources[NFD_RELEASE].body["spec"]["forProvider"]
    assert release["skipCRDs"] is True
    assert set(NFD_CRDS) <= set(COMPONENTS_BY_KEY["node-feature-discovery"].after)
    # Only the charts whose CRDs the function applies skip them.
    skipping = [
        k for k, d in out.resources.items() if d.body["spec"].get("forProvider", {}).get("skipCRDs")
    ]
    # The Standard stack: NFD's, and the charts whose CRD Job applies them (crd_job.py).
    assert sorted(skipping) == sorted(
        [
            NFD_RELEASE,
            "release-envoy-gateway",
            "release-leader-worker-set",
            "release-nvidia-dra-driver",
        ]
    )
    _, _, dynamo = converged(stack=DYNAMO)
    grove = dynamo.resources["release-grove"].body["spec"]["forProvider"]["values"]
    assert grove["crdInstaller"] == {"enabled": True}
    # Two operators, each Ready only once it serves its fail-closed webhooks, under a budget
    # that a pod never Ready cannot hold a drain with.
    assert grove["replicaCount"] == 2
    assert grove["config"]["server"]["healthProbes"] == {"enable": True}
    budget = dynamo.resources["grove-disruption-budget"].body["spec"]["forProvider"]["manifest"]
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def _converged_by(out, older: str | None) -> Observed:
    """What a cluster converged by an earlier release reports: its NFD release at the older chart
    version, with the CRDs Helm installed (older None: none applied by the function) or the
    ones the function applied marked with that version."""
    resources = {}
    for key, seen in reported(out).resources.items():
        body = copy.deepcopy(seen.body)
        if key in NFD_CRDS:
            if older is None:
                continue
            remote = body["status"]["atProvider"]["manifest"]["metadata"]["annotations"]
            remote[CHART_OF_CRD] = f"node-feature-discovery-{older}"
        if key == NFD_RELEASE:
            body["spec"]["forProvider"]["chart"]["version"] = older or "0.18.2"
            body["spec"]["forProvider"].pop("skipCRDs")
        resources[key] = ObservedResource(body)
    return Observed(resources=resources, status=out.status)


@pytest.mark.parametrize("older", [None, "0.18.2"])
def test_a_chart_bump_moves_its_crds_before_its_controller(older):
    xr, classes, out = converged()
    req = required(classes, [inference_gateway("fleet-a")])
    before = _converged_by(out, older)
    moving = compose_cluster(xr, req, before, INSTALLED)
    # The release stays as the cluster runs it; the CRDs move.
    assert moving.resources[NFD_RELEASE].body == as_desired(before.resources[NFD_RELEASE].body)
    for key in NFD_CRDS:
        assert moving.resources[key].body == out.resources[key].body
    backend = condition(moving, "BackendReady")
    assert (backend.status, backend.reason) == (False, "Installing")
    assert "nfd-crd-nodefeatures" in backend.message
    # Once the cluster's CRDs carry the new version, the controller follows.
    moved = compose_cluster(xr, req, reported(moving), INSTALLED)
    assert moved.resources[NFD_RELEASE].body == out.resources[NFD_RELEASE].body
    assert condition(moved, "BackendReady").status is True


def _plugin_on(out, nodes: int):
    observed = reported(out)
    plugin = observed.resources["dra-kubelet-plugin"].body
    plugin["status"]["atProvider"]["manifest"]["status"]["desiredNumberScheduled"] = nodes
    return observed


def test_an_existing_cluster_without_labelled_gpu_nodes_is_warned():
    xr, classes, out = converged()
    req = required(classes, [inference_gateway("fleet-a")])
    assert out.resources["dra-kubelet-plugin"].body["spec"]["managementPolicies"] == ["Observe"]
    assert [r for r in out.results if r.reason == "NoGPUNodes"] == []
    again = compose_cluster(xr, req, _plugin_on(out, 0), INSTALLED)
    [warning] = [r for r in again.results if r.reason == "NoGPUNodes"]
    assert warning.severity == "Warning"
    assert "feature.node.kubernetes.io/pci-10de.present=true" in warning.message
    assert set(again.resources) == set(out.resources)
    fine = compose_cluster(xr, req, _plugin_on(out, 3), INSTALLED)
    assert [r for r in fine.results if r.reason == "NoGPUNodes"] == []


def test_only_existing_clusters_observe_where_the_plugin_runs():
    existing_keys = {c.key for c in serving.components(STANDARD, "Existing")}
    assert "dra-kubelet-plugin" in existing_keys
    for source in ("GKE", "EKS", "AKS", "Nebius", "Vultr"):
        assert "dra-kubelet-plugin" not in {c.key for c in serving.components(STANDARD, source)}


# --- the gateway's load balancer ------------------------------------------------------------------


def provisioned(name: str, gateways: list[dict] | None = None):
    xr, classes = example(name)
    req = required(classes, [inference_gateway("fleet-a")] if gateways is None else gateways)
    req["cloud-provider-config"] = provider_configs(name)
    return xr, req, sim.converge(xr, req, None, INSTALLED)


def envoy_service(out) -> dict:
    proxy = out.resources["gateway-proxy"].body["spec"]["forProvider"]["manifest"]
    return proxy["spec"]["provider"]["kubernetes"]["envoyService"]


def test_the_watched_service_is_the_one_envoy_gateway_makes():
    # Envoy Gateway v1.8.3: "envoy-" + "<ns>-<name>-" + sha256("<ns>/<name>")[:8], in its own
    # namespace; the digest checked with `echo -n modelplane-system/inference-gateway | sha256sum`.
    assert gateway.load_balancer()["metadata"] == {
        "name": "envoy-modelplane-system-inference-gateway-5dbfd6c0",
        "namespace": "envoy-gateway-system",
    }


@pytest.mark.parametrize("name", ["eks-on-demand", "gke", "aks", "nebius", "vultr"])
def test_a_provisioned_cluster_watches_the_gateway_service_once_the_gateway_is_ready(name):
    xr, req, out = provisioned(name)
    watch = out.resources["gateway-load-balancer"].body
    assert watch["spec"]["managementPolicies"] == ["Observe", "Delete"]
    assert watch["spec"]["forProvider"]["manifest"] == gateway.load_balancer()
    # Not before the Gateway is Ready: the Service does not exist until Envoy Gateway makes it.
    again = compose_cluster(xr, req, reported(out, drop_status=("gateway",)), INSTALLED)
    assert "gateway-load-balancer" in again.resources  # kept once composed
    fresh = reported(out, drop_status=("gateway",))
    del fresh.resources["gateway-load-balancer"]
    waiting = compose_cluster(xr, req, fresh, INSTALLED)
    assert "gateway-load-balancer" not in waiting.resources
    assert "gateway" in condition(waiting, "BackendReady").message


def test_a_closed_gateway_has_no_service_to_watch_and_the_stack_waits_for_clients():
    _, _, out = provisioned("gke", gateways=[])
    assert "gateway" not in out.resources and "gateway-load-balancer" not in out.resources
    backend = condition(out, "BackendReady")
    assert (backend.status, backend.reason) == (False, "WaitingForClients")


def test_an_existing_cluster_does_not_wait_for_its_load_balancer():
    _, _, out = converged()
    assert "gateway" in out.resources and "gateway-load-balancer" not in out.resources


def test_eks_asks_for_a_network_load_balancer_and_the_others_for_their_default():
    _, _, eks = provisioned("eks-on-demand")
    assert envoy_service(eks)["annotations"] == {
        "service.beta.kubernetes.io/aws-load-balancer-type": "nlb"
    }
    assert envoy_service(provisioned("aks")[2])["annotations"] == {
        "service.beta.kubernetes.io/azure-load-balancer-tcp-idle-timeout": "30"
    }
    for name in ("gke", "nebius", "vultr"):
        assert "annotations" not in envoy_service(provisioned(name)[2]), name
    assert "annotations" not in envoy_service(converged()[2])


def test_a_live_envoy_proxy_gains_what_tunes_its_load_balancer():
    """An annotation that only tunes the load balancer (AKS's idle timeout) reaches a Service
    composed without it, in place; one a live Service does not carry and that would choose
    another load balancer never does (below)."""
    xr, req, out = provisioned("aks")
    before = reported(out)
    manifest = before.resources["gateway-proxy"].body["spec"]["forProvider"]["manifest"]
    del manifest["spec"]["provider"]["kubernetes"]["envoyService"]["annotations"]
    again = compose_cluster(xr, req, before, INSTALLED)
    assert envoy_service(again) == envoy_service(out)


def test_a_composed_envoy_proxy_keeps_the_load_balancer_it_has():
    xr, req, out = provisioned("eks-on-demand")
    before = reported(out)
    manifest = before.resources["gateway-proxy"].body["spec"]["forProvider"]["manifest"]
    del manifest["spec"]["provider"]["kubernetes"]["envoyService"]["annotations"]
    # A Service made with a Classic Load Balancer keeps it: adding the NLB annotation would
    # make a second load balancer and leak the first (kubernetes/cloud-provider-aws#1254).
    kept = compose_cluster(xr, req, before, INSTALLED)
    assert "annotations" not in envoy_service(kept)
    again = compose_cluster(xr, req, reported(out), INSTALLED)
    assert envoy_service(again) == envoy_service(out)
