"""make bench: how fast the function answers and how much memory its server holds.

Measured against the real server process over gRPC (what Crossplane sees) and in-process (what the
composition code costs). Exits non-zero when a target is missed. Never run as part of the tests.
"""

import copy
import statistics
import sys
import time
from pathlib import Path

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from tests.builders import all_classes, example
from tests.sim.providers import observe
from tests.tools.server import function_server

# Targets, per call. Crossplane shares a 2-minute budget across every step of a reconcile and runs
# up to 100 reconciles at once, so a function must answer in milliseconds and stay small.
TARGETS = {
    "existing p99 (ms)": 15.0,
    "large p99 (ms)": 60.0,
    "eks-8-pools p99 (ms)": 60.0,
    "server RSS after load (MiB)": 150.0,
}
CALLS = 300


def existing_request() -> fnv1.RunFunctionRequest:
    xr, classes = example("existing")
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for c in classes:
        req.required_resources["inference-classes"].items.add().resource.update(c)
    return req


def large_request() -> fnv1.RunFunctionRequest:
    """Eight pools, 200 InferenceClasses handed over, and 100 observed resources to carry."""
    xr, classes = example("existing")
    template = xr["spec"]["nodePools"][0]
    xr["spec"]["nodePools"] = [
        {**template, "name": f"pool-{i}", "className": f"class-{i}"} for i in range(8)
    ]
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for i in range(200):
        c = copy.deepcopy(classes[0])
        c["metadata"]["name"] = f"class-{i}"
        req.required_resources["inference-classes"].items.add().resource.update(c)
    for i in range(100):
        observed = req.observed.resources[f"object-{i}"]
        observed.resource.update(
            {
                "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
                "kind": "Object",
                "metadata": {"name": f"object-{i}", "namespace": "modelplane-system"},
                "spec": {"forProvider": {"manifest": {"data": {"k": "v" * 512}}}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    return req


def eks_request() -> fnv1.RunFunctionRequest:
    """An 8-pool EKS cluster in steady state: everything composed, observed and Ready."""
    xr, classes = example("eks-on-demand")
    template = xr["spec"]["nodePools"][0]
    xr["spec"]["nodePools"] = [{**template, "name": f"gpu-{i}"} for i in range(8)]
    out = compose_cluster(xr, all_classes(classes), Observed())
    for _ in range(5):
        seen = {}
        for key, desired in out.resources.items():
            body = copy.deepcopy(desired.body)
            body["status"] = observe(body).status
            seen[key] = ObservedResource(body)
        out = compose_cluster(xr, all_classes(classes), Observed(resources=seen))
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for c in classes:
        req.required_resources["inference-classes"].items.add().resource.update(c)
    for key, res in seen.items():
        req.observed.resources[key].resource.update(res.body)
    return req


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


def time_calls(stub, req) -> list[float]:
    samples = []
    for _ in range(CALLS):
        start = time.perf_counter()
        stub.RunFunction(req, timeout=10)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    results: dict[str, float] = {}
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        cases = (
            ("existing", existing_request()),
            ("large", large_request()),
            ("eks-8-pools", eks_request()),
        )
        for name, req in cases:
            stub.RunFunction(req, timeout=10)  # warm up
            samples = time_calls(stub, req)
            results[f"{name} p50 (ms)"] = statistics.median(samples)
            results[f"{name} p99 (ms)"] = percentile(samples, 99)
            results[f"{name} request (KiB)"] = req.ByteSize() / 1024
        results["server RSS after load (MiB)"] = rss_mib(server.pid)
    failed = False
    for key, value in results.items():
        target_value = TARGETS.get(key)
        verdict = ""
        if target_value is not None:
            ok = value <= target_value
            failed |= not ok
            verdict = f"  (target <= {target_value}: {'ok' if ok else 'MISSED'})"
        print(f"{key:32} {value:10.2f}{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
