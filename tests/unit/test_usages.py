"""Deletion order (Usages between composed resources) and the deletion guard (a ClusterUsage)."""

import copy

import pytest

from function import usages as usages_
from function.compose import compose_cluster
from function.output import Desired
from function.serving import GATEWAY_SCHEMA, GATEWAYS
from function.serving.components import Component
from function.usages import GUARD
from tests.builders import all_classes, example, provider_configs
from tests.sim.providers import World
from tests.sim.workload import inference_gateway
from tests.unit import sim

CONSUMER_KINDS = {"model-replicas-kind": True, "model-routes-kind": True, "model-caches-kind": True}
ALL_INSTALLED = {GATEWAY_SCHEMA: True, **CONSUMER_KINDS}
CAPACITY = World(
    capacity_reservations={
        "cr-0123456789abcdef0": {
            "availabilityZone": "us-east-2b",
            "instanceType": "p5en.48xlarge",
            "instanceCount": 2,
        }
    }
)


def required(name: str, consumers: dict[str, list[dict]] | None = None) -> dict:
    _, classes = example(name)
    out = all_classes(classes)
    out["cloud-provider-config"] = provider_configs(name)
    out[GATEWAYS] = [inference_gateway("fleet-a")]
    for key in ("model-replicas", "model-routes", "model-caches"):
        out[key] = copy.deepcopy((consumers or {}).get(key, []))
    return out


def converged(name: str, consumers=None, world=None):
    xr, _ = example(name)
    return xr, sim.converge(xr, required(name, consumers), world, ALL_INSTALLED)


def usages(out) -> dict[str, dict]:
    return {k: d.body for k, d in out.resources.items() if d.body["kind"] == "Usage"}


def names_of(out) -> dict[tuple[str, str, str], str]:
    """(apiVersion, kind, name) -> composition key of every composed resource."""
    return {
        (d.body["apiVersion"], d.body["kind"], d.body["metadata"]["name"]): k
        for k, d in out.resources.items()
    }


def order(out) -> set[tuple[str, str]]:
    """(of, by) composition keys of every Usage."""
    by_name = names_of(out)
    pairs = set()
    for body in usages(out).values():
        of, by = body["spec"]["of"], body["spec"]["by"]
        pairs.add(
            (
                by_name[(of["apiVersion"], of["kind"], of["resourceRef"]["name"])],
                by_name[(by["apiVersion"], by["kind"], by["resourceRef"]["name"])],
            )
        )
    return pairs


@pytest.mark.parametrize(
    ("name", "world"), [("existing", None), ("existing-dynamo", None), ("eks", CAPACITY)]
)
def test_every_usage_names_resources_of_the_same_reconcile_and_there_are_no_cycles(name, world):
    _, out = converged(name, world=world)
    pairs = order(out)  # raises KeyError if a Usage names something not composed
    assert pairs
    for body in usages(out).values():
        assert body["spec"]["replayDeletion"] is True
        assert body["metadata"]["namespace"] == "modelplane-system"
    # No cycles: repeatedly peel off resources nothing outlives.
    remaining = set(pairs)
    while remaining:
        users = {by for _, by in remaining}
        leaves = users - {of for of, _ in remaining}
        assert leaves, f"cycle among {sorted(remaining)}"
        remaining = {(of, by) for of, by in remaining if by not in leaves}


def outlives(pairs: set[tuple[str, str]], of: str, by: str) -> bool:
    """of outlives by, directly or through a chain."""
    frontier, seen = {by}, set()
    while frontier:
        current = frontier.pop()
        seen.add(current)
        parents = {o for o, b in pairs if b == current}
        if of in parents:
            return True
        frontier |= parents - seen
    return False


@pytest.mark.parametrize(
    ("of", "by"),
    [
        ("gateway-class", "gateway"),
        ("release-envoy-gateway", "gateway-class"),
        ("release-cert-manager", "gateway-serving-certificate"),
        ("release-cert-manager", "gateway-ca-issuer"),
        ("release-cert-manager", "gateway-selfsigned-issuer"),
        ("release-kai-scheduler", "kai-queue"),
        ("release-kai-scheduler", "kai-queue-root"),
        ("modelexpress-crd-modelmetadatas", "modelexpress-deployment"),
        ("modelexpress-crd-modelcacheentries", "modelexpress-deployment"),
        ("modelexpress-namespace", "modelexpress-deployment"),
        ("release-trust-manager", "gateway-ca-bundle"),
    ],
)
def test_the_deletion_order_holds(of, by):
    _, out = converged("existing-dynamo")
    assert outlives(order(out), of, by), f"{of} does not outlive {by}"


def held_by_providers(out) -> set[tuple[str, str]]:
    """(ProviderConfig, user) keys: each provider keeps the ClusterProviderConfig a managed
    resource of it names until that resource is gone (crossplane-runtime's
    providerconfig.Reconciler, counting the ProviderConfigUsage each one records in Connect)."""
    configs = {
        (d.body["apiVersion"].split("/")[0], d.body["metadata"]["name"]): k
        for k, d in out.resources.items()
        if d.body["kind"] == "ClusterProviderConfig"
    }
    pairs = set()
    for key, d in out.resources.items():
        ref = d.body.get("spec", {}).get("providerConfigRef") or {}
        group = d.body["apiVersion"].split("/")[0]
        if ref.get("kind") == "ClusterProviderConfig" and (group, ref.get("name")) in configs:
            pairs.add((configs[(group, ref["name"])], key))
    return pairs


@pytest.mark.parametrize(
    ("name", "world"),
    [("eks", CAPACITY), ("gke", None), ("aks", None), ("nebius", None), ("vultr", None)],
)
def test_the_cluster_and_its_kubeconfig_outlive_every_stack_component(name, world):
    """Through the two ProviderConfigs: the kubeconfig's writer outlives both (a Usage each), and
    each provider keeps its ProviderConfig while any of its resources exists, so no stack
    component needs a Usage of its own on the cluster."""
    _, out = converged(name, world=world)
    pairs = order(out)
    anchor = "cluster-auth" if name == "eks" else "cluster"
    held = held_by_providers(out)
    stack = [
        k
        for k, d in out.resources.items()
        if d.body["kind"] in ("Release", "Object")
        and d.body["spec"].get("managementPolicies") is None
    ]
    assert stack
    for key in stack:
        # Every stack component reaches the cluster through a composed ProviderConfig ...
        assert any(by == key for _, by in held), key
        # ... which the anchor, and the cluster, outlive; and no Usage ties it to either.
        assert outlives(pairs | held, anchor, key), key
        assert outlives(pairs | held, "cluster", key), key
        assert (anchor, key) not in pairs
    if name == "gke":
        anchor = "access-key"
    assert {(of, by) for of, by in pairs if by.startswith("provider-config-")} == {
        (anchor, "provider-config-kubernetes"),
        (anchor, "provider-config-helm"),
    }


def test_without_both_provider_configs_the_anchor_keeps_each_first_component_itself():
    """The order leans on the ProviderConfigs only when both are composed in the same reconcile;
    otherwise every component that comes after nothing is kept by the anchor, as it always was."""
    root = Component("cert-manager", lambda _ctx: {}, chart=True)
    release = Desired({"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release"})
    anchor = Desired({"apiVersion": "eks.aws.m.upbound.io/v1beta1", "kind": "ClusterAuth"})
    config = Desired({"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "X"})
    desired = {"cluster-auth": anchor, root.resource_key: release}
    alone = usages_.edges(
        [root], {**desired, "provider-config-kubernetes": config}, ("cluster-auth",)
    )
    assert alone == [usages_.Edge("cluster-auth", root.resource_key)]
    both = {**desired, "provider-config-kubernetes": config, "provider-config-helm": config}
    assert usages_.edges([root], both, ("cluster-auth",)) == [
        usages_.Edge("cluster-auth", "provider-config-kubernetes"),
        usages_.Edge("cluster-auth", "provider-config-helm"),
    ]


def test_what_a_cloud_installs_with_its_cluster_waits_for_nothing_but_its_identity():
    """What a cloud installs with its cluster dies with it (orphaned), waiting for nothing; only
    the IAM identity it acts with outlives it."""
    _, out = converged("eks", world=CAPACITY)
    pairs = order(out)
    assert {of for of, by in pairs if by == "release-cluster-autoscaler"} == {
        "iam-role-cluster-autoscaler",
        "iam-policy-cluster-autoscaler",
        "iam-attach-cluster-autoscaler-policy",
    }
    assert not any(of == "release-cluster-autoscaler" for of, _ in pairs)


def test_every_eks_identity_outlives_what_acts_with_it():
    """The cluster role deletes the gateway's load balancer (the in-tree cloud provider), so it
    and its policy attachment outlive the cluster and the load balancer watch; the node role the
    node groups; each Pod Identity role its association and what runs with it (aws-node's the
    node groups). What the node groups need is kept by the cluster alone, which EKS keeps until
    its last node group is gone (EKS_KEEPS below)."""
    _, out = converged("eks", world=CAPACITY)
    pairs = order(out)
    keys = set(out.resources)
    node_groups = {k for k in keys if k == "system-nodegroup" or k.startswith("nodegroup-")}
    assert len(node_groups) >= 2
    # EKS refuses to delete a cluster that still has node groups (DeleteCluster).
    eks_keeps = {("cluster", group) for group in node_groups}
    users = {
        ("iam-role-cluster", "iam-attach-cluster-eks"): {"cluster", "gateway-load-balancer"},
        (
            "iam-role-node",
            "iam-attach-node-worker",
            "iam-attach-node-ecr-pull",
        ): node_groups,
        ("iam-role-vpc-cni", "iam-attach-vpc-cni-cni"): {"pod-identity-vpc-cni", *node_groups},
        ("iam-role-efs-csi", "iam-attach-efs-csi-efs"): {
            "pod-identity-efs-csi",
            "addon-aws-efs-csi-driver",
        },
        (
            "iam-role-cluster-autoscaler",
            "iam-policy-cluster-autoscaler",
            "iam-attach-cluster-autoscaler-policy",
        ): {"pod-identity-cluster-autoscaler", "release-cluster-autoscaler"},
    }
    for identities, by in users.items():
        for identity in identities:
            assert identity in keys
            for user in by:
                assert user in keys, user
                assert outlives(pairs | eks_keeps, identity, user), (identity, user)
    # One Usage by the cluster, none by a node group.
    for identity in ("iam-role-node", "iam-attach-node-worker", "iam-attach-vpc-cni-cni"):
        assert (identity, "cluster") in pairs
        assert not {(identity, group) for group in node_groups} & pairs
    # And so, through the chain, the cluster role outlives the whole stack on the cluster; and
    # the nodes outlive the stack, whose controllers clear their finalizers as it uninstalls.
    held = held_by_providers(out)
    assert outlives(pairs | held, "iam-role-cluster", "release-envoy-gateway")
    for group in node_groups:
        assert (group, "cluster-auth") in pairs
        assert outlives(pairs | held, group, "release-envoy-gateway")


def replica(name: str, namespace: str = "team-a") -> dict:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"modelplane.ai/cluster": "byo-us-east"},
        },
        "spec": {},
    }


def test_the_guard_comes_with_the_first_consumer_and_goes_with_the_last():
    xr, out = converged("existing")
    assert GUARD not in out.resources
    want = out.requirements["model-replicas"]
    assert (want.kind, want.labels) == ("ModelReplica", {"modelplane.ai/cluster": "byo-us-east"})
    running = {"model-replicas": [replica("llama"), replica("qwen", "team-b")]}
    guarded = compose_cluster(xr, required("existing", running), sim.reported(out), ALL_INSTALLED)
    guard = guarded.resources[GUARD].body
    assert guard["kind"] == "ClusterUsage"
    assert guard["spec"]["of"] == {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "resourceRef": {"name": "byo-us-east"},
    }
    assert guard["spec"]["reason"] == (
        "2 ModelReplicas (team-a/llama, team-b/qwen) still run on this InferenceCluster; "
        "delete them first"
    )
    # Answers not in yet: the guard stays as it is.
    pending = required("existing", running)
    del pending["model-replicas"]
    kept = compose_cluster(xr, pending, sim.reported(guarded), ALL_INSTALLED)
    assert kept.resources[GUARD].body["spec"] == guard["spec"]
    # The last one goes: so does the guard.
    gone = compose_cluster(xr, required("existing"), sim.reported(guarded), ALL_INSTALLED)
    assert GUARD not in gone.resources


def test_consumer_kinds_not_installed_are_never_listed():
    xr, classes = example("existing")
    schemas = {
        GATEWAY_SCHEMA: False,
        "model-replicas-kind": False,
        "model-routes-kind": False,
        "model-caches-kind": False,
    }
    out = compose_cluster(xr, all_classes(classes), sim.Observed(), schemas)
    assert not {"model-replicas", "model-routes", "model-caches"} & set(out.requirements)
    assert set(out.schemas) >= {"model-replicas-kind", "model-routes-kind", "model-caches-kind"}


@pytest.mark.parametrize(
    ("name", "world"),
    [("eks", CAPACITY), ("gke", None), ("aks", None), ("nebius", None), ("vultr", None)],
)
def test_the_cloud_load_balancer_is_gone_before_the_cluster_and_its_network(name, world):
    _, out = converged(name, world=world)
    pairs = order(out) | held_by_providers(out)
    watch = "gateway-load-balancer"
    # The Gateway goes first (Envoy Gateway stops remaking the Service), then the watch deletes
    # the Service and waits for its load balancer; Envoy Gateway and the cluster outlive it.
    assert ("gateway-load-balancer", "gateway") in pairs
    assert outlives(pairs, "release-envoy-gateway", watch)
    assert outlives(pairs, "cluster", watch)
    assert not outlives(pairs, watch, "release-envoy-gateway")
    if name == "eks":
        network = [k for k in out.resources if k.startswith("subnet-")]
        for key in ("internet-gateway", "route-public-default", *network):
            assert outlives(pairs, key, watch), key
    if name == "aks":
        assert outlives(pairs, "subnet-network-contributor", watch)


def test_an_anchor_that_changes_keeps_its_usages_which_move_to_the_new_resource_in_place():
    """GKE's access key rotates: the Usages that keep it go by `access-key` whichever key is in
    use, so they are updated, never deleted (a composed Usage being deleted waits for its user,
    a release that lives on)."""

    def key(name: str) -> Desired:
        body = {"apiVersion": "cloudplatform.gcp.m.upbound.io/v1beta1", "kind": "ServiceAccountKey"}
        return Desired({**body, "metadata": {"name": name}})

    release = Desired({"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release"})
    release.body["metadata"] = {"name": "cert-manager"}
    root = Component("cert-manager", lambda _ctx: {}, chart=True)
    made = {}
    for anchor, name in (("access-key", "first"), ("access-key-2", "second")):
        desired = {"access-key": key("first"), "access-key-2": key("second")}
        desired[root.resource_key] = release
        edges = usages_.edges([root], desired, ((anchor, "access-key"),))
        made[anchor] = usages_.render(edges, desired, "xr-rotating")
        ((usage_key, usage),) = made[anchor].items()
        assert usage_key == f"usage-access-key-by-{root.resource_key}"
        assert usage.body["spec"]["of"]["resourceRef"]["name"] == name
    first, second = (next(iter(m.values())).body for m in made.values())
    assert first["metadata"] == second["metadata"]


# --- Usages that go, and what they name -------------------------------------------------------


class RefusedError(AssertionError):
    """Crossplane's garbage collection refused by the Usage webhook: nothing applied."""


def _ends(body: dict, end: str) -> tuple | None:
    ref = body.get("spec", {}).get(end)
    if not ref:
        return None
    return ref["apiVersion"], ref["kind"], ref["resourceRef"]["name"]


def _identity(body: dict) -> tuple:
    return body["apiVersion"], body["kind"], body["metadata"]["name"]


def control_plane_pass(seen: sim.Observed, out) -> sim.Observed:
    """What a control plane with Crossplane v2.2.1's Usage webhook and controller holds after
    Crossplane garbage-collects what out no longer returns, then applies out: a deleted Usage
    whose user exists stays, deleting (protection/usage/reconciler.go); a deletion of what any
    Usage names, a deleting one included, is refused and nothing is applied
    (composition_functions.go, finder.go)."""
    existing = {_identity(r.body) for r in seen.resources.values()}
    named = {_ends(r.body, "of") for r in seen.resources.values() if r.body["kind"] == "Usage"}
    deleting = {}
    for key, res in seen.resources.items():
        if key in out.resources:
            continue
        body = res.body
        if body["kind"] == "Usage":
            if _ends(body, "by") in existing:
                deleting[key] = body  # waits for its user
        elif _identity(body) in named:
            raise RefusedError(f"{key} is named by a Usage: the composition applies nothing")
    after = sim.reported(out)
    # A deleting Usage's user may have gone in this pass: then it goes too.
    users = {_identity(r.body) for r in after.resources.values()}
    for key, body in deleting.items():
        if _ends(body, "by") in users:
            after.resources[key] = sim.ObservedResource(body)
    return after


def run_passes(xr: dict, req: dict, seen: sim.Observed, passes: int = 12):
    """Reconcile against control_plane_pass until nothing changes; every pass must apply."""
    out = None
    for _ in range(passes):
        out = compose_cluster(xr, req, seen, ALL_INSTALLED)
        after = control_plane_pass(seen, out)
        if after.resources.keys() == seen.resources.keys() and all(
            after.resources[k].body == seen.resources[k].body for k in after.resources
        ):
            return out, after
        seen = after
    raise AssertionError("no convergence")


def test_a_pool_that_goes_leaves_after_the_usage_that_names_it():
    """A node group outlives ClusterAuth by a Usage: when its pool leaves the spec, the Usage is
    first rewritten without its user (ClusterAuth lives on, so deleting it would wait for ever
    and the webhook would refuse the node group's deletion, failing every composition after),
    then goes, then the node group goes."""
    xr, out = converged("eks-on-demand")
    seen = sim.reported(out)
    pools = xr["spec"]["nodePools"]
    gone = pools[-1]["name"]
    xr = copy.deepcopy(xr)
    xr["spec"]["nodePools"] = pools[:-1]
    first = compose_cluster(xr, required("eks-on-demand"), seen, ALL_INSTALLED)
    group = f"nodegroup-{gone}"
    assert group in first.resources  # kept as it runs while a Usage names it
    retiring = [
        d.body
        for k, d in first.resources.items()
        if d.body["kind"] == "Usage" and k.startswith(f"usage-{group}-by-")
    ]
    assert retiring, "the node group's Usages"
    for body in retiring:
        assert "by" not in body["spec"], body
        assert body["spec"]["reason"].startswith("modelplane.ai: retiring"), body
    final, held = run_passes(xr, required("eks-on-demand"), seen)
    assert group not in final.resources and group not in held.resources
    assert not [k for k in held.resources if k.startswith(f"usage-{group}-")]


def test_a_usage_an_earlier_release_composed_goes_without_waiting_for_its_user():
    """A Usage the function no longer composes (an earlier release's order, now held another
    way) whose user lives on is rewritten with a reason, then left out: no Usage is left
    deleting for ever, and what it names is never refused a deletion."""
    xr, out = converged("eks-on-demand")
    seen = sim.reported(out)
    (template,) = [
        d.body
        for k, d in out.resources.items()
        if d.body["kind"] == "Usage" and k == "usage-iam-role-node-by-cluster"
    ]
    old = copy.deepcopy(template)
    old["metadata"]["name"] = "old-usage-iam-role-node-by-system-nodegroup"
    old["spec"]["by"] = {
        "apiVersion": out.resources["system-nodegroup"].body["apiVersion"],
        "kind": "NodeGroup",
        "resourceRef": {"name": out.resources["system-nodegroup"].body["metadata"]["name"]},
    }
    seen.resources["usage-iam-role-node-by-system-nodegroup"] = sim.ObservedResource(old)
    first = compose_cluster(xr, required("eks-on-demand"), seen, ALL_INSTALLED)
    rewritten = first.resources["usage-iam-role-node-by-system-nodegroup"].body
    assert "by" not in rewritten["spec"] and rewritten["spec"]["of"] == old["spec"]["of"]
    final, held = run_passes(xr, required("eks-on-demand"), seen)
    assert "usage-iam-role-node-by-system-nodegroup" not in held.resources
    assert final.resources.keys() == out.resources.keys()


def test_without_the_rewrite_the_control_plane_model_refuses(monkeypatch):
    """The model above refuses what Crossplane refuses: a node group dropped with its Usage while
    the Usage's user (ClusterAuth) lives."""
    xr, out = converged("eks-on-demand")
    seen = sim.reported(out)
    xr = copy.deepcopy(xr)
    xr["spec"]["nodePools"] = xr["spec"]["nodePools"][:-1]
    monkeypatch.setattr(usages_, "retiring", lambda *_: {})
    naive = compose_cluster(xr, required("eks-on-demand"), seen, ALL_INSTALLED)
    with pytest.raises(RefusedError):
        control_plane_pass(seen, naive)
