"""InferenceCluster immutability (transition) rules, evaluated on (old, new) pairs with cel-python.

`crossplane beta validate` has no old object, so it never runs a rule that reads oldSelf. Here the
rules are read straight out of the XRD by walking its schema (the tests fail if a rule is removed,
moved or changed), then evaluated with `self` = the new value and `oldSelf` = the old one, as the
API server does on update (it runs a transition rule only when the field is in both objects).

A few spec-level rules that the validate table cannot isolate are evaluated here too.
"""

import celpy
import pytest

from tests.xrds import cel_rules


def rules(predicate) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for path, rule in cel_rules("InferenceCluster"):
        if predicate(rule["rule"]):
            found.setdefault(path, []).append(rule)
    return found


TRANSITION_RULES = rules(lambda r: "oldSelf" in r)

IMMUTABLE = {
    "spec.cluster.source": ("GKE", "EKS"),
    "spec.cluster.gke.region": ("us-central1", "europe-west4"),
    "spec.cluster.eks.region": ("us-west-2", "us-east-1"),
    "spec.cluster.aks.location": ("westeurope", "eastus2"),
    "spec.cluster.vultr.region": ("ewr", "fra"),
    "spec.stack": ("Standard", "Dynamo"),
}

ENV = celpy.Environment()


def evaluate(rule: str, new, old=None) -> bool:
    activation = {"self": celpy.json_to_cel(new)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    result = ENV.program(ENV.compile(rule)).evaluate(activation)
    assert isinstance(result, celpy.celtypes.BoolType), (
        f"{rule!r} evaluated to {result!r}, not a bool"
    )
    return bool(result)


def test_the_immutable_fields_are_exactly_the_ones_with_transition_rules():
    assert set(TRANSITION_RULES) == set(IMMUTABLE)
    for path, found in TRANSITION_RULES.items():
        assert len(found) == 1, f"{path} has {len(found)} transition rules"


@pytest.mark.parametrize("path", IMMUTABLE)
def test_transition_rule_is_self_equals_old_self_and_names_its_field(path):
    (rule,) = TRANSITION_RULES[path]
    assert rule["rule"].replace(" ", "") == "self==oldSelf"
    assert rule["message"].startswith(f"{path} is immutable"), rule["message"]


@pytest.mark.parametrize("path", IMMUTABLE)
def test_changing_an_immutable_field_is_rejected(path):
    (rule,) = TRANSITION_RULES[path]
    old, new = IMMUTABLE[path]
    assert not evaluate(rule["rule"], new, old), f"{path}: {old} -> {new} was allowed"
    assert not evaluate(rule["rule"], old, new), f"{path}: {new} -> {old} was allowed"


@pytest.mark.parametrize("path", IMMUTABLE)
def test_keeping_an_immutable_field_is_allowed(path):
    (rule,) = TRANSITION_RULES[path]
    for value in IMMUTABLE[path]:
        assert evaluate(rule["rule"], value, value), f"{path}: unchanged {value} was rejected"


def test_region_comparison_is_exact():
    """No normalisation: a case change is a change (the cloud would see a different region)."""
    (rule,) = TRANSITION_RULES["spec.cluster.gke.region"]
    assert not evaluate(rule["rule"], "US-CENTRAL1", "us-central1")


# --- Spec-level rules the validate table cannot isolate. ------------------------------------------

POOL_RULES = {
    r["message"]: r["rule"] for r in rules(lambda r: "oldSelf" not in r)["spec.nodePools[]"]
}
MIN_MAX = "spec.nodePools[].minNodeCount must not exceed maxNodeCount"


@pytest.mark.parametrize(
    ("pool", "allowed"),
    [
        ({"minNodeCount": 3, "maxNodeCount": 2}, False),
        ({"minNodeCount": 2, "maxNodeCount": 2}, True),
        ({"minNodeCount": 0, "maxNodeCount": 1}, True),
        ({"minNodeCount": 3}, True),
        ({"maxNodeCount": 3}, True),
        ({}, True),
    ],
    ids=["min-over-max", "min-equals-max", "from-zero", "min-only", "max-only", "neither"],
)
def test_min_not_over_max_on_its_own(pool, allowed):
    """Alone, the min/max rule decides by itself, and an unset count does not matter."""
    assert evaluate(POOL_RULES[MIN_MAX], {"name": "p", "className": "c", **pool}) is allowed


def test_every_pool_rule_tolerates_unset_counts():
    """Each pool rule guards with has(), so a pool with no counts passes every one of them."""
    assert len(POOL_RULES) == 4
    for message, rule in POOL_RULES.items():
        assert evaluate(rule, {"name": "p", "className": "c"}), message
