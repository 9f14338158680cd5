"""Whether the function places the EKS node monitoring agent's DCGM host engine: from the
add-on's version once read, and kept once sent (function/clusters/eks_dcgm.py)."""

import json

import pytest

from function.clusters import eks_dcgm
from function.clusters.eks import NODE_MONITORING_VALUES
from function.inputs import ObservedResource


def _addon(version: str | None = None, spec_version: str | None = None, owned=False):
    for_provider = {"configurationValues": NODE_MONITORING_VALUES[owned]}
    if spec_version:
        for_provider["addonVersion"] = spec_version
    body = {"spec": {"forProvider": for_provider}}
    if version:
        body["status"] = {"atProvider": {"addonVersion": version}}
    return ObservedResource(body)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("v1.7.0-eksbuild.1", True),
        ("v1.6.3-eksbuild.2", True),
        ("v1.10.0-eksbuild.1", True),
        ("v2.0.0", True),
        ("v1.6.2-eksbuild.1", False),
        ("v1.5.9-eksbuild.3", False),
        ("", False),
        ("latest", False),
    ],
)
def test_the_placement_is_the_function_s_from_the_version_whose_schema_takes_it(version, expected):
    assert eks_dcgm.owned(_addon(version)) is expected
    assert eks_dcgm.owned(_addon(spec_version=version)) is expected  # late-initialised


def test_not_read_is_not_owned_and_once_sent_it_stays_whatever_is_lost():
    assert eks_dcgm.owned(None) is False
    assert eks_dcgm.owned(_addon()) is False
    # Sent once: a reconcile whose observation lost the add-on's status keeps it.
    assert eks_dcgm.owned(_addon(owned=True)) is True


@pytest.mark.parametrize(
    "values",
    [
        '{"monitoringAgent": {"affinity": {}}}',  # another section's placement
        '{"dcgmAgent": {"tolerations": [{"key": "affinity"}]}}',  # the word, not the key
        '{"dcgmAgent": "affinity"}',
        "not json, affinity",
        None,
    ],
)
def test_only_a_placement_of_the_dcgm_agent_counts_as_sent(values):
    addon = ObservedResource({"spec": {"forProvider": {"configurationValues": values}}})
    assert eks_dcgm.owned(addon) is False


def test_the_function_s_placement_keeps_the_chart_s_and_adds_every_amd64_nvidia_node():
    values = json.loads(NODE_MONITORING_VALUES[True])["dcgmAgent"]
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    first, second = (t["matchExpressions"] for t in terms["nodeSelectorTerms"])
    assert first == list(eks_dcgm.LISTED)
    assert {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]} in second
    assert eks_dcgm.NVIDIA in second
    assert "affinity" not in json.loads(NODE_MONITORING_VALUES[False])["dcgmAgent"]
    assert (
        values["tolerations"]
        == json.loads(NODE_MONITORING_VALUES[False])["dcgmAgent"]["tolerations"]
    )


@pytest.mark.parametrize(
    ("version", "named"),
    [
        ("v1.6.2-eksbuild.1", (1, 6, 2)),
        ("v1.5.9-eksbuild.3", (1, 5, 9)),
        ("1.6.3", (1, 6, 3)),
        ("latest", None),
        (None, None),
    ],
)
def test_the_agent_s_version_is_read_as_numbers_and_an_older_one_is_told(version, named):
    addon = _addon(version)
    assert eks_dcgm.version(addon) == named
    told = eks_dcgm.outdated(addon, "mp-agent")
    if named is not None and named < eks_dcgm.OWNED_FROM:
        assert told is not None
        assert f"v{'.'.join(map(str, named))}" in told
        assert "the Addon mp-agent to v1.6.3 or later" in told
    else:
        assert told is None


def test_an_agent_that_takes_the_placement_already_is_not_told_whatever_its_status_says():
    # The placement was sent (the add-on was moved, then its status lost or stale): nothing to do.
    assert eks_dcgm.outdated(_addon("v1.6.2-eksbuild.1", owned=True), "mp-agent") is None
    assert eks_dcgm.outdated(None, "mp-agent") is None
