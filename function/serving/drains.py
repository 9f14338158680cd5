"""What keeps a component serving through a routine node drain (managed node upgrades on EKS,
GKE and AKS drain every node): two replicas, spread, and a disruption budget that lets a drain
evict one at a time and never blocks it for ever."""

# Two of everything on the request path or needed to start a pod: a drain evicts one, the other
# serves.
REPLICAS = 2
# At most one of them down for a voluntary disruption: with two, the drain waits for the evicted
# one to be back before it takes the other.
BUDGET = {"maxUnavailable": 1}
# A budget the function composes itself also lets a drain evict a pod that is not Ready
# (policy/v1 unhealthyPodEvictionPolicy, GA in Kubernetes 1.31): a replica that never becomes
# Ready would otherwise block every drain of its node for good.
ALWAYS_ALLOW = "AlwaysAllow"
OWN_BUDGET = {**BUDGET, "unhealthyPodEvictionPolicy": ALWAYS_ALLOW}


def spread(labels: dict[str, str]) -> list[dict]:
    """Replicas spread over nodes, then zones, as far as the nodes allow: ScheduleAnyway, so a
    one-node system pool still holds both (the budget then keeps one up through a drain), and
    tainted GPU nodes the pods never go to do not count as empty domains."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": dict(labels)},
        }
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]


def chart_values(labels: dict[str, str]) -> dict:
    """A Deployment's values, as cert-manager v1.20.2 and ai-gateway-helm v1.1.0 name them
    (replicaCount, podDisruptionBudget.enabled, topologySpreadConstraints); labels: its pods'
    selector labels."""
    return {
        "replicaCount": REPLICAS,
        "podDisruptionBudget": {"enabled": True, **BUDGET},
        "topologySpreadConstraints": spread(labels),
    }
