"""Every fail-closed webhook of the stack is reachable from a private GKE control plane, and the
composed Firewall opens nothing the webhooks do not need.

The API server calls an admission or conversion webhook on the IP of a pod behind the webhook's
Service, at the container port the Service's targetPort names. A GKE cluster with private nodes
admits only TCP 443 and 10250 from the control plane range (GKE "Automatically created firewall
rules", the gke-<cluster>-<hash>-master rule); every other port a fail-closed webhook serves on
must be opened by the composed Firewall (function/clusters/gke.py WEBHOOK_PORTS), or no object it
admits can be written.

What a GKE cluster installs is converged in process for each stack, and every Release is rendered
with the real Helm from ../shared/charts (tests/charts.py) with the function's own values; the
manifests the function applies itself (its Objects: CRDs, ...) count too. A webhook is fail-closed
when its failurePolicy is Fail or unset (Fail is admissionregistration.k8s.io/v1's default); a CRD
conversion webhook always is. Webhooks operators create at run time are not in any render: they
are RUNTIME below, each read from the operator's code at its pinned tag.
"""

import copy
import json
from dataclasses import dataclass

import pytest

from function.clusters import gke
from function.serving.components import DYNAMO, STANDARD
from tests import charts
from tests.builders import all_classes, example, provider_configs
from tests.unit import sim

# What GKE's own rule from the control plane already admits.
GKE_OPEN = frozenset({443, 10250})
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


@dataclass(frozen=True)
class Webhook:
    """One webhook the API server calls: what it is, and the container port it reaches."""

    what: str
    port: int
    source: str


# Webhooks the KAI Scheduler's operator (kai-scheduler v0.16.8, kai-scheduler/KAI-Scheduler at tag
# v0.16.8, commit 40da4c87) makes at run time from its Config, with their Services and
# Deployments: fail-closed (FailurePolicy Fail), each Service's webhook port 443 to the
# targetPort below. The chart's kai-config (templates/_helpers.tpl, applied by its post-install
# hook) sets only admission's targetPort (test_kai_admission_port_is_the_charts below); the other
# two are the operator's defaults (pkg/apis/kai/v1/*/ SetDefaultsWhereNeeded), where
# controller-runtime's webhook server listens by default (webhook.DefaultPort, the binaries set
# no other: cmd/podgroupcontroller, cmd/queuecontroller).
# Grove v0.1.0-alpha.11's operator makes no webhook configuration (its cert controller only fills
# the caBundle of the chart's own), so it has no row.
KAI_RUNTIME = (
    Webhook(
        "kai-scheduler admission: Mutating and ValidatingWebhookConfiguration on pods",
        9443,
        "pkg/operator/operands/admission/resources.go (Service admission, targetPort "
        "Webhook.TargetPort; --webhook-addr); pkg/apis/kai/v1/admission/admission.go default 9443",
    ),
    Webhook(
        "kai-scheduler podgroup-controller: ValidatingWebhookConfiguration on podgroups",
        9443,
        "pkg/operator/operands/pod_group_controller/resources.go (Service podgroup-controller); "
        "pkg/apis/kai/v1/pod_group_controller/pod_group_controller.go default 9443",
    ),
    Webhook(
        "kai-scheduler queue-controller: ValidatingWebhookConfiguration on queues",
        9443,
        "pkg/operator/operands/queue_controller/resources.go (Service queue-controller); "
        "pkg/apis/kai/v1/queue_controller/queue_controller.go default 9443",
    ),
)
RUNTIME = {STANDARD: (), DYNAMO: KAI_RUNTIME}


def gke_cluster(stack: str):
    """A GKE cluster of the gke example on the stack, converged with the providers simulated."""
    xr, classes = example("gke")
    xr = copy.deepcopy(xr)
    xr["spec"]["stack"] = stack
    required = all_classes(classes) | {"cloud-provider-config": provider_configs("gke")}
    return sim.converge(xr, required)


@pytest.fixture(scope="module", params=[STANDARD, DYNAMO])
def installed(request) -> tuple[str, list[dict], dict]:
    """(stack, every manifest a GKE cluster on it installs, the composed Firewall)."""
    out = gke_cluster(request.param)
    bodies = [d.body for d in out.resources.values()]
    manifests = []
    for release in (b for b in bodies if b["kind"] == "Release"):
        assert charts.checked(release), charts.release_name(release)
        namespace = release["spec"]["forProvider"]["namespace"]
        # The chart's crds/ whoever applies them: Helm, the CRD Job (skipCRDs) or an Object.
        for rendered in charts.template(release, crds=True):
            m = copy.deepcopy(rendered)
            m["metadata"].setdefault("namespace", namespace)
            manifests.append(m)
    manifests += [
        b["spec"]["forProvider"]["manifest"]
        for b in bodies
        if b["kind"] == "Object" and b["spec"].get("managementPolicies") != ["Observe"]
    ]
    return request.param, manifests, out.resources["webhook-firewall"].body


def fail_closed(manifests: list[dict]) -> list[tuple[str, dict]]:
    """(what, the Service reference) of every fail-closed admission and conversion webhook."""
    found = []
    for m in manifests:
        name = f"{m['kind']} {m['metadata']['name']}"
        if m["kind"] in WEBHOOK_KINDS:
            for w in m.get("webhooks") or []:
                if w.get("failurePolicy", "Fail") == "Fail":
                    found.append((f"{name}: {w['name']}", w["clientConfig"]))
        elif m["kind"] == "CustomResourceDefinition":
            conversion = m["spec"].get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                found.append((f"{name}: conversion", conversion["webhook"]["clientConfig"]))
    return found


def _selects(service: dict, workload: dict) -> bool:
    selector = service["spec"].get("selector") or {}
    labels = workload["spec"]["template"]["metadata"].get("labels") or {}
    return bool(selector) and selector.items() <= labels.items()


def container_port(manifests: list[dict], what: str, client: dict) -> int:
    """The container port the API server reaches through the webhook's Service: its port (443
    unless given), that port's targetPort (the port itself unless given), a named one resolved
    through the container ports of the pods the Service selects."""
    ref = client.get("service")
    assert ref is not None, f"{what}: calls a URL ({client.get('url')}), not a Service"
    [service] = [
        m
        for m in manifests
        if m["kind"] == "Service"
        and (m["metadata"]["namespace"], m["metadata"]["name"]) == (ref["namespace"], ref["name"])
    ] or [None]
    assert service is not None, f"{what}: no Service {ref['namespace']}/{ref['name']} installed"
    port = ref.get("port", 443)
    [entry] = [p for p in service["spec"]["ports"] if p["port"] == port] or [None]
    assert entry is not None, f"{what}: Service {ref['name']} has no port {port}"
    target = entry.get("targetPort", port)
    if isinstance(target, int):
        return target
    if target.isdigit():
        return int(target)
    pods = [
        m["spec"]["template"]["spec"]
        for m in manifests
        if m["kind"] in WORKLOADS
        and m["metadata"]["namespace"] == ref["namespace"]
        and _selects(service, m)
    ]
    named = {
        p["containerPort"]
        for pod in pods
        for c in pod["containers"]
        for p in c.get("ports") or []
        if p.get("name") == target
    }
    assert len(named) == 1, f"{what}: targetPort {target!r} names {sorted(named)} in {len(pods)}"
    return named.pop()


def webhooks(stack: str, manifests: list[dict]) -> list[Webhook]:
    """Every fail-closed webhook on the stack, the rendered and the operators' own."""
    rendered = [
        Webhook(what, container_port(manifests, what, client), "rendered")
        for what, client in fail_closed(manifests)
    ]
    return rendered + list(RUNTIME[stack])


def opened(firewall: dict) -> set[int]:
    """The TCP ports the Firewall opens to the control plane range."""
    spec = firewall["spec"]["forProvider"]
    assert spec["direction"] == "INGRESS"
    assert spec["sourceRanges"] == [gke.MASTER_CIDR]
    [allow] = spec["allow"]
    assert allow["protocol"] == "tcp"
    return {int(p) for p in allow["ports"]}


def test_every_fail_closed_webhook_is_reachable_from_the_control_plane(installed):
    stack, manifests, firewall = installed
    found = webhooks(stack, manifests)
    open_ports = opened(firewall) | GKE_OPEN
    unreachable = [(w.what, w.port) for w in found if w.port not in open_ports]
    assert unreachable == [], f"{stack}: closed to the GKE control plane"


def test_the_firewall_opens_only_what_the_webhooks_need(installed):
    """No wider: each port opened serves some fail-closed webhook on every stack (the rule does
    not depend on the stack because no stack needs less; should one ever, this fails)."""
    stack, manifests, firewall = installed
    needed = {w.port for w in webhooks(stack, manifests)} - GKE_OPEN
    assert opened(firewall) == needed, stack
    assert set(gke.WEBHOOK_PORTS) == needed, stack


def test_the_webhooks_found_are_the_ones_the_port_table_names(installed):
    """The check itself: it finds the webhooks WEBHOOK_PORTS names as sources (so a render that
    found none could not pass), and cert-manager's on 10250."""
    stack, manifests, _ = installed
    found = {w.what: w.port for w in webhooks(stack, manifests)}
    ai_gateway = (
        "MutatingWebhookConfiguration envoy-ai-gateway-gateway-pod-mutator.envoy-ai-gateway-system:"
        " ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local"
    )
    expected = {
        "ValidatingWebhookConfiguration trust-manager: trust.cert-manager.io": 6443,
        ai_gateway: 9443,
        "MutatingWebhookConfiguration mp-cert-manager-webhook: webhook.cert-manager.io": 10250,
        "ValidatingWebhookConfiguration mp-cert-manager-webhook: webhook.cert-manager.io": 10250,
    }
    if stack == STANDARD:
        expected |= {
            "CustomResourceDefinition leaderworkersets.leaderworkerset.x-k8s.io: conversion": 9443,
            "MutatingWebhookConfiguration lws-mutating-webhook-configuration: mpod.kb.io": 9443,
            "ValidatingWebhookConfiguration lws-validating-webhook-configuration: vpod.kb.io": 9443,
        }
    else:
        expected |= {
            "MutatingWebhookConfiguration podcliqueset-defaulting-webhook:"
            " pcs.defaulting.webhooks.grove.io": 9443,
            "ValidatingWebhookConfiguration podcliqueset-validating-webhook:"
            " pcs.validating.webhooks.grove.io": 9443,
        } | {w.what: w.port for w in KAI_RUNTIME}
    assert {w: found.get(w) for w in expected} == expected, (stack, sorted(found))


def test_a_webhook_on_a_port_neither_gke_nor_the_firewall_opens_is_caught():
    """The check itself, on a made-up chart: a named targetPort resolved through the pod."""
    manifests = [
        {
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "made-up"},
            "webhooks": [
                {"name": "v.example", "clientConfig": {"service": {"namespace": "x", "name": "s"}}},
                {
                    "name": "ignored.example",
                    "failurePolicy": "Ignore",
                    "clientConfig": {"service": {"namespace": "x", "name": "nowhere"}},
                },
            ],
        },
        {
            "kind": "Service",
            "metadata": {"name": "s", "namespace": "x"},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 443, "targetPort": "https"}]},
        },
        {
            "kind": "Deployment",
            "metadata": {"name": "a", "namespace": "x"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "a", "more": "x"}},
                    "spec": {
                        "containers": [
                            {"name": "c", "ports": [{"name": "https", "containerPort": 8443}]}
                        ]
                    },
                }
            },
        },
    ]
    [(what, client)] = fail_closed(manifests)
    assert container_port(manifests, what, client) == 8443
    assert 8443 not in set(gke.WEBHOOK_PORTS) | GKE_OPEN


def test_kai_admission_port_is_the_charts():
    """KAI's admission targetPort comes from the chart's kai-config with the function's values
    (rendered as the chart's own tests render it, _test.renderKaiConfig), and the kai-config
    leaves the PodGroup and Queue controllers' webhooks at the operator's defaults."""
    out = gke_cluster(DYNAMO)
    [release] = [
        d.body
        for d in out.resources.values()
        if d.body["kind"] == "Release" and charts.chart_of(d.body)["name"] == "kai-scheduler"
    ]
    chart = charts.chart_of(release)
    spec = release["spec"]["forProvider"]
    values = copy.deepcopy(spec.get("values") or {}) | {"_test": {"renderKaiConfig": True}}
    rendered = charts._template(
        charts.chart_path(chart["name"], chart["version"]),
        charts.release_name(release),
        spec["namespace"],
        json.dumps(values, sort_keys=True),
        charts.helm_bin(),
        False,
    )
    [config] = [m for m in rendered if m["kind"] == "Config"]
    admission = config["spec"]["admission"]["webhook"]
    assert (admission["port"], admission["targetPort"]) == (443, KAI_RUNTIME[0].port)
    for operand in ("podGroupController", "queueController"):
        assert "controllerService" not in (config["spec"].get(operand) or {}), operand
