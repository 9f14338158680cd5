"""Every Release the function composes, against the real chart it names (tests/charts.py).

- The chart exists as its repository publishes it, at exactly the version the Release names
  (provider-helm compares that string with the installed chart's version).
- Every value the function sets is one the chart reads: in values.yaml, its schema, or a template.
- `helm template` renders it with the Release's own values, and every manifest it installs
  validates: core kinds against the Kubernetes schema (strict), the rest against the chart's own
  CRDs and ../shared/crds/workload.
"""

import copy
import json
from pathlib import Path

import pytest
import yaml

from function import names
from function.serving import adoption, gateway_api
from function.serving.components import CHART_OF_CRD, COMPONENTS, DRA_KUBELET_PLUGIN
from function.versions import CHART_CRDS, CHARTS, GATEWAY_API_BUNDLE
from tests import charts, nodes
from tests.conftest import crds_dir
from tests.e2e.charts_server import STAND_IN_CHARTS, STAND_INS
from tests.unit.sim import differing
from tests.validation import validate_manifests

EXAMPLES = charts.converged_examples()


def distinct_releases() -> dict[str, list[dict]]:
    """Each chart's distinct Releases (by values) over every example, by chart name."""
    found: dict[str, dict[str, dict]] = {}
    for example in EXAMPLES:
        for release in charts.releases(example):
            spec = release["spec"]["forProvider"]
            key = json.dumps([charts.release_name(release), spec], sort_keys=True)
            found.setdefault(charts.chart_of(release)["name"], {})[key] = release
    return {name: list(by_key.values()) for name, by_key in sorted(found.items())}


RELEASES = distinct_releases()
CHECKED = sorted(name for name in RELEASES if name not in charts.UNCHECKED)


def test_every_example_converges_with_releases():
    assert len(EXAMPLES) >= 10, EXAMPLES
    assert all(charts.releases(e) for e in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_release_names_a_published_chart_at_its_exact_version(example):
    for release in charts.releases(example):
        if not charts.checked(release):
            continue
        chart = charts.chart_of(release)
        assert charts.chart_path(chart["name"], chart["version"]), (
            f"{charts.release_name(release)}: no chart {chart['name']} at version "
            f"{chart['version']!r} in {charts.charts_dir()}"
        )


@pytest.mark.parametrize("chart", CHECKED)
def test_every_value_the_function_sets_is_read_by_its_chart(chart):
    for release in RELEASES[chart]:
        version = charts.chart_of(release)["version"]
        path = charts.chart_path(chart, version)
        values = release["spec"]["forProvider"].get("values") or {}
        ignored = [".".join(p) for p in charts.leaf_paths(values) if not charts.reads(path, p)]
        assert ignored == [], f"{chart} {version} never reads {ignored}"


def test_an_ignored_value_is_caught():
    """The check itself: values network-operator 26.4.0 no longer reads are refused."""
    path = charts.chart_path("network-operator", "26.4.0")
    assert not charts.reads(path, ("deployCR",))
    assert not charts.reads(path, ("ofedDriver", "deploy"))
    assert charts.reads(path, ("operator", "tolerations"))
    dra = charts.chart_path(DRA_CHART, CHARTS["nvidia-dra-driver"].version)
    assert charts.reads(dra, ("kubeletPlugin", "tolerations"))
    assert not charts.reads(dra, ("kubeletPlugin", "tolerationz"))


@pytest.fixture(scope="module")
def chart_crds(tmp_path_factory) -> Path:
    """Every CRD the charts install, in one file: a chart's custom resources may be of a kind
    another chart of the stack defines (network-operator's NodeFeatureRules are NFD's)."""
    crds = {
        m["metadata"]["name"]: m
        for name in CHECKED
        for release in RELEASES[name]
        for m in charts.template(release)
        if m["kind"] == "CustomResourceDefinition"
    } | {m["metadata"]["name"]: m for m in applied_crds()}
    path = tmp_path_factory.mktemp("chart-crds") / "crds.json"
    path.write_text("\n---\n".join(json.dumps(crds[k]) for k in sorted(crds)) + "\n")
    return path


@pytest.mark.parametrize("chart", CHECKED)
def test_every_release_renders_and_validates(
    chart, crossplane, validate_cache, chart_crds, tmp_path
):
    manifests = [m for release in RELEASES[chart] for m in charts.template(release)]
    assert manifests, chart
    extensions = [crds_dir() / "workload", chart_crds]
    count, _ = validate_manifests(crossplane, validate_cache, manifests, tmp_path, extensions)
    assert count >= 1


def _by_identity(objects) -> dict[tuple, dict]:
    return {
        (o.get("kind"), o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
    }


@pytest.mark.parametrize("chart", CHECKED)
def test_helm_v4_renders_every_release_as_helm_v3_does(chart):
    """The e2e proves provider-helm v1.3.0 (Helm v3.21.1); the Configuration installs v1.4.0
    (Helm v4.2.3). Both Helms render every Release the function composes to the same objects,
    but for what the chart draws at random (a generated CA: the fields two Helm v3 renderings
    disagree on), so what the chart tests and the e2e prove with one holds for the other."""
    v4 = charts.helm_bin("HELM4", "helm4")
    for release in RELEASES[chart]:
        v3_objects = _by_identity(charts.template(release))
        random = _by_identity(charts.template(release, again=True))
        v4_objects = _by_identity(charts.template(release, v4))
        name = charts.release_name(release)
        assert v4_objects.keys() == v3_objects.keys(), name
        for key, v3 in v3_objects.items():
            drawn = differing(v3, random[key])
            assert differing(v3, v4_objects[key]) <= drawn, (name, key)


# --- where the GPU DaemonSets land ------------------------------------------------------------------

# DaemonSets that must run on every GPU node, by (chart, DaemonSet name in the rendered chart):
# the NFD worker labels the node, the DRA kubelet plugin publishes its GPUs, DRANET its EFA devices.
DRA_CHART = CHARTS["nvidia-dra-driver"].name
GPU_DAEMONSETS = {
    "node-feature-discovery": "mp-node-feature-discovery-worker",
    DRA_CHART: DRA_KUBELET_PLUGIN["metadata"]["name"],
}


# DRANET publishes the EFA devices of EFA nodes (aws-dranet 1.0.0: affinity on the instance types that
# have EFA, supportedInstanceLabels in values.yaml).
EFA_DAEMONSET = "mp-efa-dra-driver-aws-dranet"


def daemonset_specs(manifests, name: str) -> dict:
    [ds] = [m for m in manifests if m["kind"] == "DaemonSet" and m["metadata"]["name"] == name]
    return ds["spec"]["template"]["spec"]


def existing_gpu_nodes(example: str) -> list[nodes.Node]:
    [xr] = [d for d in charts.converged(example) if d["kind"] == "InferenceCluster"]
    return nodes.existing_gpu_nodes(xr)


@pytest.mark.parametrize("example", EXAMPLES)
def test_gpu_daemonsets_run_on_every_gpu_node(example):
    docs = charts.converged(example)
    gpu = nodes.gpu_nodes(docs) or existing_gpu_nodes(example)
    assert gpu, f"{example} has no GPU node"
    rendered = {
        charts.chart_of(r)["name"]: charts.template(r)
        for r in charts.releases(example)
        if charts.checked(r)
    }
    nfd = rendered["node-feature-discovery"]
    config = nodes.nfd_worker_config(nfd)
    worker = daemonset_specs(nfd, GPU_DAEMONSETS["node-feature-discovery"])
    for node in gpu:
        # The NFD worker must land first: the labels below are its work.
        assert nodes.why_not(worker, node) is None, (node.pool, nodes.why_not(worker, node))
        node.labels |= nodes.nfd_labels(config, [nodes.NVIDIA_GPU])
        for chart, name in GPU_DAEMONSETS.items():
            spec = daemonset_specs(rendered[chart], name)
            assert nodes.why_not(spec, node) is None, (chart, node.pool, nodes.why_not(spec, node))
        if node.fabric == "efa":
            spec = daemonset_specs(rendered["aws-dranet"], EFA_DAEMONSET)
            assert nodes.why_not(spec, node) is None, (
                "aws-dranet",
                node.pool,
                nodes.why_not(spec, node),
            )
    assert any(n.fabric == "efa" for n in gpu) == ("aws-dranet" in rendered), example


@pytest.mark.parametrize(
    ("fields", "placed"),
    [
        # The function's NFD (and the GPU operator's): vendor alone, pci-10de.
        (["vendor"], True),
        # NFD's defaults, class and vendor (pci-0302_10de): dra-driver-nvidia-gpu 0.4.1 takes it
        # too (nvidia-dra-driver-gpu 25.12.0 did not).
        (["class", "vendor"], True),
        # The check itself: a label the plugin's affinity names nowhere.
        (["device", "vendor"], False),
    ],
)
def test_the_dra_plugin_lands_on_gpu_nodes_as_nfd_labels_them(fields, placed):
    [release] = [r for r in charts.releases("existing") if charts.chart_of(r)["name"] == DRA_CHART]
    plugin = daemonset_specs(charts.template(release), GPU_DAEMONSETS[DRA_CHART])
    node = nodes.Node(
        "gpu", {}, [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    )
    config = {"sources": {"pci": {"deviceLabelFields": fields}}}
    node.labels |= nodes.nfd_labels(config, [nodes.NVIDIA_GPU])
    why = nodes.why_not(plugin, node)
    assert (why is None) == placed, (node.labels, why)
    if not placed:
        assert "required node affinity" in why


# --- what Envoy Gateway may read -------------------------------------------------------------------

ENVOY_GATEWAY_SA = ("envoy-gateway", "envoy-gateway-system")


def _grants(docs, subject: tuple[str, str]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the ClusterRoles bound to the ServiceAccount allow."""
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    bound = [
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and any(
            (s["kind"], s["name"], s.get("namespace")) == ("ServiceAccount", *subject)
            for s in d.get("subjects") or []
        )
    ]
    grants = set()
    for name in bound:
        for rule in roles.get(name, {}).get("rules", []):
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    grants |= {(group, resource, verb) for verb in rule.get("verbs", [])}
    return grants


def manifests_before(docs, component: str) -> list[dict]:
    """The manifests of the Objects a component comes after, all the way down: what is on the
    cluster before it is first created."""
    by_key = {c.key: c for c in COMPONENTS}
    [xr] = [d["metadata"]["name"] for d in docs if d["kind"] == "InferenceCluster"]
    todo, keys = list(by_key[component].after), set()
    while todo:
        key = todo.pop()
        if key not in keys:
            keys.add(key)
            todo += by_key[key].after
    objects = {names.child_name(xr, k) for k in keys if not by_key[k].chart}
    return [
        d["spec"]["forProvider"]["manifest"]
        for d in docs
        if d["kind"] == "Object" and d["metadata"]["name"] in objects
    ]


def _backend_resources(values: dict) -> list[tuple[str, str]]:
    """(group, plural) of the backendResources Envoy Gateway is told to watch."""
    crds = {}
    for path in sorted((crds_dir() / "workload").rglob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd["spec"]["names"]["plural"]
    manager = values["config"]["envoyGateway"]["extensionManager"]
    return [(r["group"], crds[(r["group"], r["kind"])]) for r in manager["backendResources"]]


@pytest.mark.parametrize("example", EXAMPLES)
def test_envoy_gateway_may_read_every_backend_resource_it_watches(example):
    docs = charts.converged(example)
    [release] = [
        r for r in charts.releases(example) if charts.chart_of(r)["name"] == "gateway-helm"
    ]
    rendered = charts.template(release)
    # What is on the cluster before Envoy Gateway installs: the Objects of the components it comes
    # after (ai-gateway-helm's own grant comes later, so it cannot count).
    before = manifests_before(docs, "envoy-gateway")
    watched = _backend_resources(release["spec"]["forProvider"]["values"])
    assert watched == [("inference.networking.k8s.io", "inferencepools")]
    grants = _grants([*rendered, *before], ENVOY_GATEWAY_SA)
    for group, resource in watched:
        for verb in ("get", "list", "watch"):
            assert (group, resource, verb) in grants, (example, group, resource, verb)
    # The chart alone does not grant it: the function's grant is what makes the difference.
    assert ("inference.networking.k8s.io", "inferencepools", "list") not in _grants(
        rendered, ENVOY_GATEWAY_SA
    )


def test_the_nebius_csi_stand_in_installs_what_the_function_relies_on():
    """csi-mounted-fs-path has no public source: the e2e's chart server serves our stand-in
    (tests/e2e/stand-in-charts) under its name and version. Rendered by the real Helm with the
    Nebius Release's own values, it gives the CSI driver the composed StorageClass provisions
    with, and a node DaemonSet on the GPU nodes that mounts the data directory the function sets."""
    assert set(charts.UNCHECKED) == STAND_INS
    (release,) = [
        r for r in charts.releases("nebius") if charts.chart_of(r)["name"] == "csi-mounted-fs-path"
    ]
    chart, spec = charts.chart_of(release), release["spec"]["forProvider"]
    folder = STAND_IN_CHARTS / f"{chart['name']}-{chart['version']}"
    meta = yaml.safe_load((folder / "Chart.yaml").read_text())
    assert (meta["name"], meta["version"]) == (chart["name"], chart["version"])
    rendered = charts._template(
        folder,
        charts.release_name(release),
        spec["namespace"],
        json.dumps(spec["values"], sort_keys=True),
        charts.helm_bin(),
    )
    by_kind = {m["kind"]: m for m in rendered}
    classes = [
        o["spec"]["forProvider"]["manifest"]
        for o in charts.converged("nebius")
        if o["kind"] == "Object"
        and o["spec"]["forProvider"]["manifest"].get("kind") == "StorageClass"
    ]
    assert [c["provisioner"] for c in classes] == [by_kind["CSIDriver"]["metadata"]["name"]]
    pod = by_kind["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == spec["values"]["tolerations"]
    assert pod["volumes"][0]["hostPath"]["path"] == spec["values"]["dataDir"]


def applied_crds() -> list[dict]:
    """The charts' CRDs the function applies itself (CHART_CRDS), as its Objects carry them."""
    return [
        o["spec"]["forProvider"]["manifest"]
        for example in EXAMPLES
        for o in charts.converged(example)
        if o["kind"] == "Object"
        and o["spec"]["forProvider"]["manifest"]["kind"] == "CustomResourceDefinition"
        and CHART_OF_CRD in o["spec"]["forProvider"]["manifest"]["metadata"].get("annotations", {})
    ]


@pytest.mark.parametrize("component", sorted(CHART_CRDS))
def test_a_release_that_skips_its_crds_gets_them_from_the_function(component):
    """The real chart's path: what its crds/ render (helm --include-crds) and its release skips is
    exactly what the function applies, each marked with the chart's version."""
    release = own_release(component)
    assert release["spec"]["forProvider"]["skipCRDs"] is True
    skipped = {
        m["metadata"]["name"]: m
        for m in charts.template(release, crds=True)
        if m not in charts.template(release)
    }
    assert skipped and all(m["kind"] == "CustomResourceDefinition" for m in skipped.values())
    applied = {m["metadata"]["name"]: m for m in applied_crds() if m["metadata"]["name"] in skipped}
    assert applied.keys() == skipped.keys()
    chart = charts.chart_of(release)
    for name, crd in applied.items():
        marked = copy.deepcopy(crd)
        assert marked["metadata"]["annotations"].pop(CHART_OF_CRD) == (
            f"{chart['name']}-{chart['version']}"
        )
        assert marked == skipped[name], name


def own_release(component: str) -> dict:
    """The function's own Release of a component (mp-<key>), from any converged example."""
    return next(
        r
        for releases in RELEASES.values()
        for r in releases
        if charts.release_name(r) == f"mp-{component}"
    )


@pytest.mark.parametrize("component", sorted(adoption.DETECTORS))
def test_each_detector_finds_what_the_pinned_chart_installs(component):
    """A detector looks for what the real chart installs: the object of its name, or objects of
    its kind carrying its labels; and the function's own release gives what the detector needs
    of it (CRD fields, a role's rules, a flag), so the same install by someone else is adopted."""
    d = adoption.DETECTORS[component]
    found = [
        m
        for m in charts.template(own_release(component))
        if (m.get("apiVersion"), m.get("kind")) == (d.api_version, d.kind)
        and (
            m["metadata"]["name"] == d.name
            if d.name
            else dict(d.labels).items() <= (m["metadata"].get("labels") or {}).items()
        )
    ]
    assert found, f"{component}: the chart installs no {d.kind} the detector finds"
    for manifest in found:
        if d.refusal:  # refused whatever it is, unless it is the function's own release
            continue
        assert adoption._refused(component, manifest, "the function's own release", []) is None


def test_the_gateway_api_bundle_the_function_expects_is_the_one_gateway_helm_carries():
    """function/serving/gateway_api.py installs Envoy Gateway over another owner's Gateway API
    CRDs only when they are this bundle: every Gateway API CRD in the chart's crds/ says so, and
    the Gateway CRD it reads is among them."""
    chart = CHARTS["envoy-gateway"]
    path = charts.chart_path(chart.name, chart.version)
    assert path is not None
    bundle = (path / "charts/crds/crds/gatewayapi-crds.yaml").read_text()
    crds = [c for c in yaml.safe_load_all(bundle) if c]
    assert {
        (
            c["metadata"]["annotations"][gateway_api.BUNDLE_VERSION],
            c["metadata"]["annotations"][gateway_api.CHANNEL],
        )
        for c in crds
        if c["spec"]["group"].startswith("gateway.networking")
    } == {GATEWAY_API_BUNDLE}
    assert gateway_api.SOUGHT.name in {c["metadata"]["name"] for c in crds}


# --- NetworkPolicy: enforced on GKE (Dataplane V2), AKS (Cilium), EKS, Nebius, Vultr ------------

POLICY_KINDS = frozenset(
    {
        "NetworkPolicy",
        "CiliumNetworkPolicy",
        "CiliumClusterwideNetworkPolicy",
        "AdminNetworkPolicy",
        "BaselineAdminNetworkPolicy",
        "GlobalNetworkPolicy",  # Calico's, as Vultr's CNI would enforce it
    }
)
POLICY_RESOURCES = frozenset(
    {
        "networkpolicies",
        "ciliumnetworkpolicies",
        "ciliumclusterwidenetworkpolicies",
        "adminnetworkpolicies",
        "baselineadminnetworkpolicies",
        "globalnetworkpolicies",
        "*",
    }
)
POLICY_GROUPS = frozenset(
    {"networking.k8s.io", "cilium.io", "policy.networking.k8s.io", "crd.projectcalico.org", "*"}
)
# Policies (chart, kind, namespace, name) and runtime writers of them (chart, role kind, name) a
# rendered chart may carry, each with what keeps the stack reachable under it (webhooks from the
# API server, the gateway, metrics). None today: every chart the function installs leaves its
# policies off by default (cert-manager, dra-driver-nvidia-gpu and NFD `networkPolicy.enabled:
# false`, network-operator's sriov-network-operator, the only writer, disabled), and the
# function sets none of those values.
ACCOUNTED_POLICIES: dict[tuple[str, str, str, str], str] = {}
ACCOUNTED_WRITERS: dict[tuple[str, str, str], str] = {}


def policies(manifests) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of each network policy among manifests."""
    return {
        (m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"])
        for m in manifests
        if m.get("kind") in POLICY_KINDS
    }


def policy_writers(manifests) -> set[tuple[str, str]]:
    """(kind, name) of each Role or ClusterRole that may write network policies: what an
    operator would need to make one at run time (KAI's and Grove's operators make their parts so)."""
    found = set()
    for m in manifests:
        if m.get("kind") not in {"Role", "ClusterRole"}:
            continue
        for rule in m.get("rules") or []:
            if (
                POLICY_GROUPS & set(rule.get("apiGroups") or [])
                and POLICY_RESOURCES & set(rule.get("resources") or [])
                and {"create", "update", "patch", "*"} & set(rule.get("verbs") or [])
            ):
                found.add((m["kind"], m["metadata"]["name"]))
    return found


@pytest.mark.parametrize("chart", CHECKED)
def test_no_chart_ships_a_network_policy_that_is_not_accounted_for(chart):
    """Enforcement alone cuts nothing off only while nothing selects a pod: every Release
    rendered by the real Helm with the function's values carries no network policy and no role
    to write one at run time, unless ACCOUNTED_* names it with why the stack still works."""
    for release in RELEASES[chart]:
        rendered = charts.template(release)
        found = {(chart, *p) for p in policies(rendered)}
        assert found <= set(ACCOUNTED_POLICIES), sorted(found - set(ACCOUNTED_POLICIES))
        writers = {(chart, *w) for w in policy_writers(rendered)}
        assert writers <= set(ACCOUNTED_WRITERS), sorted(writers - set(ACCOUNTED_WRITERS))


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_function_composes_no_network_policy_itself(example):
    objects = [
        d["spec"]["forProvider"]["manifest"]
        for d in charts.converged(example)
        if d["kind"] == "Object"
    ]
    assert policies(objects) == set()
    assert policy_writers(objects) == set()


def test_a_chart_that_ships_a_network_policy_is_caught():
    """The check itself: cert-manager 1.20.2 with its webhook's policy on renders one, and the
    sriov-network-operator network-operator 26.4.0 can enable may write them."""
    (release,) = RELEASES["cert-manager"][:1]
    on = copy.deepcopy(release)
    on["spec"]["forProvider"].setdefault("values", {})["webhook"] = {
        **on["spec"]["forProvider"]["values"].get("webhook", {}),
        "networkPolicy": {"enabled": True},
    }
    assert ("NetworkPolicy", "cert-manager", "mp-cert-manager-webhook-allow-ingress") in (
        policies(charts.template(on, again=True))
    )
    (operator,) = RELEASES["network-operator"][:1]
    sriov = copy.deepcopy(operator)
    sriov["spec"]["forProvider"]["values"]["sriovNetworkOperator"] = {"enabled": True}
    assert policy_writers(charts.template(sriov, again=True))
