"""Composition of both kinds, from typed inputs to an Output. No protobuf in here.

Safety rule: Crossplane deletes whatever a successful run stops returning. When an input is missing
for a moment (a class deleted, a requirement not answered yet, a source not built), every resource
already observed is returned again as it is, so only a change of spec can remove a resource.
"""

from function import clusters, failures, forcenew, serving, status, usages
from function.clusters.base import as_desired
from function.inputs import (
    Classes,
    Inputs,
    Observed,
    ObservedResource,
    class_requirements,
    parse_class,
    parse_cluster,
    resolve_classes,
)
from function.models import InferenceCluster
from function.output import Condition, Desired, Output, Requirement, Result


def compose_class(body: dict) -> Output:
    """An InferenceClass has no children: it is valid (and ready) or it is a Fatal error."""
    cls = parse_class(body)
    devices = ", ".join(
        f"{d.name} x{d.count} ({d.claim} {d.device_class_name or d.driver})"
        for d in cls.spec.devices
    )
    return Output(
        conditions=[Condition("Accepted", True, "ValidDevices", f"devices: {devices}")],
        ready=True,
    )


def compose_cluster(
    body: dict,
    required: dict[str, list[dict]],
    observed: Observed,
    schemas: dict[str, bool] | None = None,
    *,
    ask_first: bool = False,
    marshalled: bytes | None = None,
) -> Output:
    """The cluster's desired state.

    With ask_first (Crossplane runs a requirements loop and only its last answer counts), a call
    that lacks something it needs answers with its requirements alone and composes nothing: the
    next call, with everything handed over, composes once. marshalled: body marshalled, when the
    caller keeps it so (fn.composite_of).
    """
    xr = parse_cluster(body, marshalled)
    schemas = schemas or {}
    wanted, wanted_schemas = requirements(xr, required, schemas, observed)
    if ask_first and (wanted.keys() - required.keys() or wanted_schemas.keys() - schemas.keys()):
        return Output(requirements=wanted, schemas=wanted_schemas, deferred=True)
    inputs = Inputs(
        xr=xr,
        classes=resolve_classes(xr, required),
        observed=observed,
        required=required,
        schemas=schemas,
    )

    cluster = clusters.render(inputs)
    stack = serving.render(inputs, cluster)
    # What runs keeps the fields its provider cannot change in place (a new release, a new class).
    # Usages have none, and name only what they guard (apiVersion, kind and name): added after.
    resources, kept = forcenew.keep_live({**cluster.resources, **stack.resources}, observed)
    guards = usages.compose(
        inputs,
        cluster.anchors,
        (*cluster.outlives, *stack.outlives),
        serving.components(xr.spec.stack, xr.spec.cluster.source),
        resources,
    )
    resources |= guards
    complete = cluster.complete and inputs.classes.complete
    retired: dict[str, Desired] = {}
    if not complete:
        resources = {**carry_forward(observed, resources), **resources}
    else:
        # A Usage that goes while its user stays, and what a Usage still names, go in their
        # turn (only a complete composition lets anything go at all).
        retired = usages.retiring(observed.resources, resources, guards.keys())
        resources |= retired
    resources = dict(sorted(resources.items()))  # once: the failures pass keeps this order
    # Ready once the cluster and its whole stack are; a gateway still waiting for its first
    # client is closed by design, not unready.
    installed = stack.ready or stack.reason == "WaitingForClients"

    return Output(
        resources=resources,
        status=status.render(inputs, cluster, stack),
        conditions=[
            cluster_condition(cluster),
            Condition("BackendReady", stack.ready, stack.reason, stack.message),
            stack.gpus,
            stack.health,
            classes_condition(inputs.classes),
        ],
        results=cluster.results
        + stack.results
        + kept
        + failures.warnings(
            observed.resources, resources, guards.keys() | retired.keys() if retired else guards
        )
        + class_results(xr, inputs.classes),
        requirements=wanted,
        schemas=wanted_schemas,
        ready=None if complete and cluster.ready and installed else False,
    )


def requirements(
    xr: InferenceCluster,
    required: dict[str, list[dict]],
    schemas: dict[str, bool],
    observed: Observed,
) -> tuple[dict[str, Requirement], dict[str, Requirement]]:
    """Everything a reconcile of xr asks Crossplane for: (resources, schemas)."""
    wanted = {
        **class_requirements(xr, required),
        **clusters.requirements(xr),
        **serving.requirements(schemas),
        **serving.adoption_requirements(xr, observed.resources),
        **usages.requirements(xr.name, schemas),
    }
    return wanted, {serving.GATEWAY_SCHEMA: serving.GATEWAY_KIND, **usages.consumer_schemas()}


def carry_forward(observed: Observed, desired: dict[str, Desired]) -> dict[str, Desired]:
    """Observed resources this run could not render, returned unchanged so none is deleted."""
    return {
        key: Desired(body=as_desired(res.body), ready=_carried_ready(res))
        for key, res in observed.resources.items()
        if key not in desired
    }


def _carried_ready(res: ObservedResource) -> bool:
    # ProviderConfigs have no Ready condition; existing is all they need.
    return res.ready or str(res.get("kind") or "").endswith("ProviderConfig")


def cluster_condition(cluster: clusters.ClusterFacts) -> Condition:
    return Condition("ClusterReady", cluster.ready, cluster.reason, cluster.message)


def classes_condition(classes: Classes) -> Condition:
    if classes.pending:
        return Condition("ClassesResolved", False, "Fetching", "waiting for InferenceClasses")
    problems = [f'InferenceClass "{c}" not found' for c in classes.missing]
    problems += [f'InferenceClass "{c}" is invalid: {why}' for c, why in classes.invalid.items()]
    if problems:
        reason = "ClassNotFound" if classes.missing else "InvalidClass"
        return Condition("ClassesResolved", False, reason, "; ".join(problems))
    count = len(classes.resolved)
    return Condition(
        "ClassesResolved",
        True,
        "Resolved",
        f"every InferenceClass the pools name is here ({count})" if count else "no pools",
    )


def class_results(xr: InferenceCluster, classes: Classes) -> list[Result]:
    def named_by(c: str) -> str:
        pools = [
            f"spec.nodePools[{i}]" for i, p in enumerate(xr.spec.node_pools) if p.class_name == c
        ]
        return f'InferenceClass "{c}" (className of {", ".join(pools)})'

    results = [
        Result(
            "Warning",
            f"{named_by(c)} not found; its pools keep their current resources until it exists",
            reason="ClassNotFound",
        )
        for c in classes.missing
    ]
    results += [
        Result("Warning", f"{named_by(c)} is invalid: {why}", reason="InvalidClass")
        for c, why in classes.invalid.items()
    ]
    return results
