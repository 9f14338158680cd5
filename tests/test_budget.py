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
# access made once a cluster and shared: 55 bodies held for good, made again no more), then 41.4
# at 3.68 KiB (327 resources). Then 47.3 at 3.89 KiB with 53 Usages fewer (issue 65, 2026-12-07):
# Usages were the cheapest resources, so the dearer ones left weigh more each while the cluster
# as a whole holds less (1066 KiB instead of 1203) and calls less (12,960 instead of 13,540):
# the held bound goes from 3.9 to 4.1 for that reason alone.
HELD_PER_RESOURCE_KIB = 4.1
CALLS_PER_RESOURCE = 57
CLUSTERS = 4
# And what the largest shape costs whole, on the control plane and on the wire: its composed
# resources (each an object in etcd, watched by its controller, observed in every request) and
# the bytes of the largest request Crossplane sends for it (every observed resource with the
# metadata the API server keeps) and of the desired state answered. Measured 2026-12-07: 327
# resources, 170 of them Usages, a 936.6 KB request and 290.9 KB desired; then 274, 117, 820.9 KB
# and 260.2 KB once the ProviderConfigs and the EKS cluster keep what one Usage each kept (issue
# 65); then 296, 127, 899.4 KB and 285.9 KB with the CRD Jobs of gateway-helm and the DRA
# driver (a ServiceAccount, ClusterRole, binding and Job per chart: 8 resources and their
# Usages, issue 64) and the GPU metrics (namespace, quota, release, the ServiceMonitor
# detector: 4 and theirs); then 296, 127, 952.1 KB and 312.3 KB once the CRD Jobs' apply step
# and the GPU health reporter are Python programs (function/serving/programs, about 9 and 7 KB of
# source, in each Object's manifest as asked and as observed: registry.k8s.io/kubectl has no
# shell to run the shorter bash scripts they replace); then 301, 129, 967.5 KB and 318.1 KB with
# EKS's second GPU metrics release (its own host engine on GPU nodes without the node monitoring
# agent's, as arm64 p6e-gb200: a release, its namespace and quota, and two Usages, issue 64).
# The count is exact (it does not move unless a resource is added); the bytes have 1% of room
# (about two resources' observed bytes) for what moves without a new resource: a chart's or an
# image's version, a longer default. A capability that adds resources raises these in its own
# commit, with what it costs.
COMPOSED_RESOURCES = 301
REQUEST_BYTES = 977_200
DESIRED_BYTES = 321_300


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


def test_the_largest_shape_stays_within_its_objects_and_bytes(fleet):
    """What one cluster of the largest shape puts on the control plane and the wire."""
    call = FunctionRunner().answer
    _, sent, answer = bench.run_reconcile(call, fleet[0])
    caches.forget()
    desired = fnv1.RunFunctionResponse.FromString(answer).desired
    resources = len(desired.resources)
    usages = sum(1 for k in desired.resources if k.startswith("usage-"))
    request, answered = max(len(r) for r in sent), len(desired.SerializeToString())
    print(f"{resources} resources ({usages} Usages), {request} request bytes, {answered} desired")
    assert resources <= COMPOSED_RESOURCES, f"{resources} composed resources"
    assert request <= REQUEST_BYTES, f"{request} bytes in the largest request"
    assert answered <= DESIRED_BYTES, f"{answered} desired bytes"
    # The bounds are the measure, not far above it: a change that sheds resources lowers them.
    assert resources == COMPOSED_RESOURCES, f"{resources} composed resources: lower the bound"
    assert request > 0.97 * REQUEST_BYTES and answered > 0.97 * DESIRED_BYTES
