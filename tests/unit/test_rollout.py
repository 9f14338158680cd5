"""Node pools follow their control plane's minor one at a time, GPU pools last."""

from types import SimpleNamespace

import pytest

from function.clusters.rollout import Member, done, movers, say

TARGET = (1, 36)
OLD = (1, 35)


def pool(key: str, gpu: bool = True, asked=OLD, runs=OLD, ready=True, exists=True) -> Member:
    return Member(key, gpu=gpu, exists=exists, asked=asked, runs=runs, ready=ready)


def test_the_system_and_cpu_pools_go_first_then_gpu_pools_by_name_one_at_a_time():
    pools = [pool("b-gpu"), pool("a-gpu"), pool("system", gpu=False)]
    assert movers(pools, TARGET) == {"system"}
    pools[2] = pool("system", gpu=False, asked=TARGET, runs=TARGET)
    assert movers(pools, TARGET) == {"system", "a-gpu"}
    pools[1] = pool("a-gpu", asked=TARGET, runs=TARGET)
    assert movers(pools, TARGET) == {"system", "a-gpu", "b-gpu"}


@pytest.mark.parametrize(
    "underway",
    [
        # Asked, not there yet.
        pool("system", gpu=False, asked=TARGET, runs=OLD),
        # There, not Ready yet (its nodes still being replaced).
        pool("system", gpu=False, asked=TARGET, runs=TARGET, ready=False),
        # Its provider reports nothing while it is not Ready: hold.
        pool("system", gpu=False, asked=TARGET, runs=None, ready=False),
    ],
)
def test_no_pool_goes_while_one_is_on_its_way(underway):
    assert movers([underway, pool("a-gpu")], TARGET) == {"system"}
    assert not done(underway, TARGET)


def test_a_pool_not_made_yet_waits_for_nothing_and_holds_nothing_back():
    fresh = pool("new-gpu", exists=False, asked=None, runs=None)
    assert done(fresh, TARGET)
    assert movers([fresh, pool("a-gpu")], TARGET) == {"new-gpu", "a-gpu"}


def test_a_ready_pool_whose_version_is_not_reported_lags_nothing():
    """GKE pools at rest ask for no version; one whose provider reports none is not moved."""
    quiet = pool("a-gpu", asked=None, runs=None)
    assert done(quiet, TARGET)
    assert movers([quiet, pool("b-gpu")], TARGET) == {"a-gpu", "b-gpu"}


def test_a_pool_the_cloud_moved_itself_counts_as_there():
    moved = pool("system", gpu=False, asked=OLD, runs=TARGET)
    assert movers([moved, pool("a-gpu")], TARGET) == {"system", "a-gpu"}


def test_nothing_is_said_while_every_pool_runs_the_minor_even_one_rolling_its_nodes():
    told = SimpleNamespace(results=[])
    rolling = pool("a-gpu", asked=TARGET, runs=TARGET, ready=False)
    say(told, [rolling, pool("system", gpu=False, asked=TARGET, runs=TARGET)], TARGET, {"a-gpu"})
    assert told.results == []
    say(told, [rolling, pool("b-gpu")], TARGET, frozenset({"a-gpu"}))
    assert [r.reason for r in told.results] == ["NodePoolsFollowing"]
    assert "a-gpu now; then b-gpu" in told.results[0].message
