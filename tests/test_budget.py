"""Budgets CI holds without timing anything, per composed resource of the largest shape: what its
reconciles leave held in the caches, and how many Python calls its composition made again costs.

Both are deterministic for the same code and inputs (tracemalloc counts bytes, cProfile calls),
so a change that makes each resource dearer fails here, not months later in `make bench`, where
the timings and the server's RSS stay (docs/performance.md).
"""

import cProfile
import gc
import pstats
import tracemalloc

import pytest
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import caches
from function.fn import FunctionRunner
from tests.tools import bench

# The largest shape (EKS, 8 pools, EFA and Capacity Blocks, Dynamo), per composed resource: what
# its reconciles leave in the caches, and the Python calls of one composition made again. Per
# resource, so that a change adding resources passes and one making each dearer fails. Measured:
# 4.43 KiB at 264 resources (2026-12-03; 5.17 while a kept composition held its bodies), 4.44 at
# 287 (2026-12-05), 3.92 at 294 once versions were one short bytes and a kept composition's
# names marshalled (2026-12-05), 3.60 at 308 once Usages were no longer read (2026-12-06);
# 76.6 calls, then 66.6, then 55.0, then 52.1 (the observed names no longer sorted, keep_live
# over cluster and stack only, 2026-12-06), then 49.4 at 3.54 KiB (keep_live reads a live
# resource's frozen fields once and passes over shared bodies; one group of encoded entries a
# cluster, 2026-12-06), then 42.2 at 3.73 KiB (the EKS network, IAM, storage, EFA group and
# access made once a cluster and shared: 55 bodies held for good, made again no more).
HELD_PER_RESOURCE_KIB = 3.9
CALLS_PER_RESOURCE = 57
CLUSTERS = 4


@pytest.fixture(scope="module")
def fleet() -> list[bench.Reconcile]:
    """CLUSTERS of the largest shape, each reconciled once so that what Crossplane sends back
    (the required resources asked for) is built before anything is measured."""
    logging.configure(logging.Level.DISABLED)  # pytest would hold every message it captures
    reconciles = bench.fleet_of(bench.worst_case(), CLUSTERS)
    call = FunctionRunner().answer
    for reconcile in reconciles:
        reconcile.orders = 0  # as Python marshals it: the caches know resources by version
        bench.run_reconcile(call, reconcile)
    caches.forget()
    return reconciles


def test_a_cluster_of_the_largest_shape_holds_its_budget_in_the_caches(fleet):
    """The growth of traced memory from the first cluster to the last, per cluster: what the
    caches hold for one (the first also pays what is made once for every cluster)."""
    call = FunctionRunner().answer
    caches.forget()
    gc.collect()
    tracemalloc.start()
    try:
        _, _, answer = bench.run_reconcile(call, fleet[0])
        gc.collect()
        first = tracemalloc.get_traced_memory()[0]
        for reconcile in fleet[1:]:
            bench.run_reconcile(call, reconcile)
        gc.collect()
        last = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        caches.forget()
    resources = len(fnv1.RunFunctionResponse.FromString(answer).desired.resources)
    held = (last - first) / (len(fleet) - 1) / 1024 / resources
    print(f"{held:.2f} KiB held per resource, {resources} resources")
    assert held <= HELD_PER_RESOURCE_KIB, f"{held:.2f} KiB held per resource"
    # And the caches' own weighing stays honest about it (their budget is in those bytes).
    assert held > 0.5 * HELD_PER_RESOURCE_KIB


def test_a_composition_made_again_stays_within_its_calls_per_resource(fleet):
    call = FunctionRunner().answer
    reconcile = fleet[0]
    bench.run_reconcile(call, reconcile)  # every cache warm but the composition's own
    bench.FORGETS["made"]()
    profile = cProfile.Profile()
    profile.enable()
    _, _, answer = bench.run_reconcile(call, reconcile)
    profile.disable()
    caches.forget()
    resources = len(fnv1.RunFunctionResponse.FromString(answer).desired.resources)
    per_resource = pstats.Stats(profile).total_calls / resources
    assert resources > 250
    print(f"{per_resource:.1f} calls per resource")
    assert per_resource <= CALLS_PER_RESOURCE, f"{per_resource:.1f} calls per resource"
