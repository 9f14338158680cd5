"""A year in production, read from what the real charts install with the function's values.

- No certificate a chart makes inside Helm (genCA, genSignedCert) expires within three years: Helm
  never renews one (`lookup` hands the same Secret back on every upgrade), so one that expires
  stops what relies on it on that day. A certificate that must expire sooner comes from
  cert-manager, which renews it: each chart's cert-manager Certificate names an Issuer the same
  rendering or the function installs.
- Every pinned chart's crds/ has a path that moves them with the chart (Helm installs crds/ once):
  the function's CRD Job, its Objects, the chart's own pre-upgrade hook or installer.
- The gateway survives a drain: the AI Gateway's controller, whose fail-closed webhook every new
  Envoy proxy pod needs, runs two replicas, spread, under a disruption budget that selects them.
"""

import base64
import datetime
import re

import pytest
import yaml
from cryptography import x509

from function.serving import drains
from function.serving.components import (
    AI_GATEWAY_VALUES,
    AI_GATEWAY_WEBHOOK_SECRET,
    COMPONENTS,
    GROVE_BUDGET,
    GROVE_VALUES,
    KAI_BUDGETED,
    LWS_BUDGET,
    crd_job_key,
    kai_budget,
)
from function.versions import CHART_CRD_FILES, CHART_CRDS, CHARTS, CLOUD_CHARTS
from tests import charts
from tests.test_charts import CHECKED, RELEASES, own_release
from tests.unit.test_crd_job import crd_files

# A cluster is planned to run for years; a certificate that lives less needs a renewer.
THREE_YEARS = datetime.timedelta(days=3 * 365)
PEM = re.compile(r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----")


def _strings(node, path=""):
    """Every string in a manifest, with where it is."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def _pem_in(text: str) -> list[str]:
    """The PEM certificates a string holds, as written or base64-encoded (Secret data,
    caBundle)."""
    found = PEM.findall(text)
    if not found and len(text) > 200 and re.fullmatch(r"[A-Za-z0-9+/=\s]+", text):
        try:
            found = PEM.findall(base64.b64decode(text).decode(errors="replace"))
        except ValueError:
            found = []
    return found


def made_in_helm(manifests) -> list[tuple[str, datetime.datetime]]:
    """(where, notAfter) of every certificate in a rendering: none but those Helm made."""
    out = []
    for m in manifests:
        where = f"{m['kind']} {m['metadata'].get('namespace', '')}/{m['metadata']['name']}"
        for path, text in _strings(m):
            for pem in _pem_in(text):
                cert = x509.load_pem_x509_certificate(pem.encode())
                out.append((f"{where} {path}", cert.not_valid_after_utc))
    return out


def _expiring(manifests) -> list[str]:
    limit = datetime.datetime.now(datetime.UTC) + THREE_YEARS
    return [f"{w} expires {t:%Y-%m-%d}" for w, t in made_in_helm(manifests) if t < limit]


@pytest.mark.parametrize("chart", CHECKED)
def test_no_certificate_a_chart_makes_in_helm_expires_within_three_years(chart):
    for release in RELEASES[chart]:
        expiring = _expiring(charts.template(release))
        assert not expiring, (charts.release_name(release), expiring)


def test_the_check_finds_the_ai_gateways_own_certificate():
    """Without cert-manager, ai-gateway-helm v1.1.0 signs its webhook's certificate for 365
    days inside Helm: the check sees it, so a chart that does so again fails."""
    release = own_release("ai-gateway")
    controller = dict(AI_GATEWAY_VALUES["controller"])
    del controller["mutatingWebhook"]
    default = {**release, "spec": {**release["spec"]}}
    default["spec"]["forProvider"] = {
        **release["spec"]["forProvider"],
        "values": {"controller": controller},
    }
    expiring = _expiring(charts.template(default))
    assert any("Secret envoy-ai-gateway-system/self-signed-cert" in e for e in expiring), expiring


def _issuers(manifests) -> set[tuple[str, str, str]]:
    return {
        (m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"])
        for m in manifests
        if m["kind"] in ("Issuer", "ClusterIssuer")
    }


@pytest.mark.parametrize("chart", CHECKED)
def test_every_certificate_a_chart_asks_of_cert_manager_has_its_issuer(chart):
    """cert-manager renews a Certificate only through its Issuer: the chart installs it (a
    self-signed one for its webhook), none is left to the user."""
    for release in RELEASES[chart]:
        manifests = charts.template(release)
        issuers = _issuers(manifests)
        for m in manifests:
            if m["kind"] != "Certificate":
                continue
            ref = m["spec"]["issuerRef"]
            kind = ref.get("kind", "Issuer")
            ns = m["metadata"].get("namespace", "") if kind == "Issuer" else ""
            assert (kind, ns, ref["name"]) in issuers, (charts.release_name(release), m)


def _pods_of(manifests, kind: str, name: str) -> tuple[dict, dict]:
    [found] = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found, found["spec"]["template"]


def test_the_ai_gateway_webhook_is_served_from_a_certificate_cert_manager_renews():
    manifests = charts.template(own_release("ai-gateway"))
    [cert] = [m for m in manifests if m["kind"] == "Certificate"]
    [hook] = [m for m in manifests if m["kind"] == "MutatingWebhookConfiguration"]
    deployment, pod = _pods_of(manifests, "Deployment", "ai-gateway-controller")
    assert cert["spec"]["secretName"] == AI_GATEWAY_WEBHOOK_SECRET
    # cainjector keeps the webhook's caBundle in step with each renewal.
    ns = cert["metadata"]["namespace"]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{ns}/{cert['metadata']['name']}"
    )
    assert hook["webhooks"][0]["failurePolicy"] == "Fail"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["certs"]["secret"]["secretName"] == AI_GATEWAY_WEBHOOK_SECRET
    # No Secret of the chart's own making is left.
    assert not [m for m in manifests if m["kind"] == "Secret"]
    assert deployment["spec"]["replicas"] == drains.REPLICAS


# What a drain must never take all of, by the function's release: each Deployment on the request
# path (the Envoy Gateway controller serves every proxy its configuration), or whose webhook or
# work a new pod or node needs (the AI Gateway's pod webhook, cert-manager's webhook and cainjector,
# NFD's master labelling new GPU nodes), or that publishes the gateway's CA (trust-manager's
# fail-closed Bundle webhook).
DRAIN_SAFE = {
    "cert-manager": ("mp-cert-manager", "mp-cert-manager-webhook", "mp-cert-manager-cainjector"),
    "envoy-gateway": ("envoy-gateway",),
    "ai-gateway": ("ai-gateway-controller",),
    "node-feature-discovery": ("mp-node-feature-discovery-master",),
    "trust-manager": ("trust-manager",),
}


# Charts whose budget takes policy/v1 unhealthyPodEvictionPolicy (cert-manager v1.20.2 by value,
# NFD 0.18.3 by default): a replica that never turns Ready does not block a drain. gateway-helm
# v1.8.3, ai-gateway-helm v1.1.0 and trust-manager v0.24.0 render no such field.
UNHEALTHY_EVICTABLE = {"cert-manager", "node-feature-discovery"}


def _evictable(budget: dict, replicas: int) -> int:
    spec = budget["spec"]
    if "maxUnavailable" in spec:
        return int(spec["maxUnavailable"])
    return replicas - int(spec["minAvailable"])


@pytest.mark.parametrize("component", sorted(DRAIN_SAFE))
def test_what_the_stack_needs_survives_a_drain(component):
    """Two replicas, a budget that selects them and lets a drain evict exactly one at a time
    (never zero: a drain blocked for ever stalls the node upgrade), and spread constraints, where
    set, that count its own pods."""
    manifests = charts.template(own_release(component))
    budgets = [m for m in manifests if m["kind"] == "PodDisruptionBudget"]
    for name in DRAIN_SAFE[component]:
        deployment, pod = _pods_of(manifests, "Deployment", name)
        labels = pod["metadata"]["labels"]
        replicas = deployment["spec"]["replicas"]
        assert replicas == drains.REPLICAS, name
        [budget] = [
            b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert _evictable(budget, replicas) == 1, (name, budget["spec"])
        if component in UNHEALTHY_EVICTABLE:
            assert budget["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow", name
        for constraint in pod["spec"].get("topologySpreadConstraints") or []:
            assert constraint["labelSelector"]["matchLabels"].items() <= labels.items(), name
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway", name


def test_engine_pods_admission_survives_a_drain():
    """LWS's pod webhooks, Grove's PodCliqueSet webhooks and KAI's admission and scheduler admit
    and place every engine: two LWS controllers and two Grove operators under the function's
    budgets (the charts have none), and every KAI operand at two replicas through the kai-config
    the chart's hook applies."""
    manifests = charts.template(own_release("leader-worker-set"))
    deployment, pod = _pods_of(
        manifests, "Deployment", "mp-leader-worker-set-lws-controller-manager"
    )
    assert deployment["spec"]["replicas"] == drains.REPLICAS
    assert (
        LWS_BUDGET["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    assert LWS_BUDGET["metadata"]["namespace"] == deployment["metadata"]["namespace"]

    grove = charts.template(own_release("grove"))
    deployment, pod = _pods_of(grove, "Deployment", "grove-operator")
    assert deployment["spec"]["replicas"] == drains.REPLICAS
    selector = GROVE_BUDGET["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert GROVE_BUDGET["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert not [m for m in grove if m["kind"] == "PodDisruptionBudget"]  # the chart has none
    # Ready only once it serves: the chart's readiness probe, on.
    assert pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"

    kai = charts.template(own_release("kai-scheduler"))
    [config] = [m for m in kai if m["metadata"]["name"] == "kai-config-manifest"]
    rendered = yaml.safe_load(config["data"]["kai-config.yaml"])
    assert rendered["spec"]["global"]["replicaCount"] == drains.REPLICAS
    operator, operator_pod = _pods_of(kai, "Deployment", "kai-operator")
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect=true" in args
    # The operator's own budget goes to admission alone (the kai-config turns it on there only):
    # every other operand the kai-config runs, named as the operator names its pods' `app`, and
    # the chart's operator get the function's, and none overlaps admission's.
    spec = rendered["spec"]
    running = {k for k, v in spec.items() if isinstance(v, dict) and _service(v).get("enabled")}
    budgeted = {
        k for k in running if _service(spec[k]).get("podDisruptionBudget", {}).get("enabled")
    }
    assert budgeted == {"admission"}
    operand_apps = {
        "binder": "binder",
        "podGroupController": "podgroup-controller",
        "podGrouper": "pod-grouper",
        "queueController": "queue-controller",
    }
    assert running - {"admission", "scheduler"} == set(operand_apps)
    assert "scheduler" in running
    scheduler = f"{spec.get('global', {}).get('schedulerName', 'kai-scheduler')}-default"
    apps = {*operand_apps.values(), scheduler, operator_pod["metadata"]["labels"]["app"]}
    assert set(KAI_BUDGETED) == apps
    assert not [m for m in kai if m["kind"] == "PodDisruptionBudget"]  # the chart has none
    for app in KAI_BUDGETED:
        budget = kai_budget(app)
        assert budget["metadata"]["namespace"] == operator["metadata"]["namespace"]
        assert _evictable(budget, drains.REPLICAS) == 1


def _service(operand: dict) -> dict:
    service = operand.get("service")
    return service if isinstance(service, dict) else {}


# How each pinned chart's crds/ move with it (docs/stack.md, "CRDs that move with their charts"),
# by release key; a chart with no crds/ has its CRDs in templates, which Helm upgrades.
CRD_PATHS = {
    "envoy-gateway": "the function's CRD Job",
    "leader-worker-set": "the function's CRD Job",
    "nvidia-dra-driver": "the function's CRD Job",
    "node-feature-discovery": "the function's Objects",
    "kai-scheduler": "the chart's pre-upgrade hook",
    "network-operator": "the chart's pre-upgrade hook",
    "grove": "the operator's CRD installer",
}
ALL_CHARTS = {**CHARTS, **CLOUD_CHARTS}


def test_every_pinned_chart_with_crds_has_a_path_that_moves_them():
    with_crds = {
        key
        for key, chart in ALL_CHARTS.items()
        if chart.name not in charts.UNCHECKED
        and crd_files(charts.charts_dir() / f"{chart.name}-{chart.version}")
    }
    assert with_crds == set(CRD_PATHS)


@pytest.mark.parametrize("key", sorted(CRD_PATHS))
def test_each_path_that_moves_a_chart_s_crds_is_there(key):
    by_key = {c.key: c for c in COMPONENTS}
    path = CRD_PATHS[key]
    if path == "the function's CRD Job":
        assert key in CHART_CRD_FILES  # tests/unit/test_crd_job.py: every file, pinned
        assert by_key[key].crd_job == crd_job_key(key)
    elif path == "the function's Objects":
        assert key in CHART_CRDS and by_key[key].crds
    elif path == "the chart's pre-upgrade hook":
        hooks = [
            m
            for m in charts.template(own_release(key))
            if m["kind"] == "Job"
            and "pre-upgrade" in (m["metadata"].get("annotations") or {}).get("helm.sh/hook", "")
            and "crd" in m["metadata"]["name"]
        ]
        assert hooks, f"{key}: no pre-upgrade hook Job moves its CRDs"
    else:
        assert GROVE_VALUES["crdInstaller"] == {"enabled": True}
