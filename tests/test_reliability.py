"""Generated InferenceClusters: every one the XRD admits composes without a Fatal, the same way
every time (and in every process), and everything it composes is valid.

Hypothesis draws clusters for every source, stack, fabric, Capacity Block and credentials
combination (tests/strategies.py), with classes that fit them. Each is reconciled through the
servicer a few times with the providers simulated. At the end, one `crossplane beta validate`
call proves every drawn cluster and class is admitted by the XRDs and every composed resource (and
manifest inside an Object) is valid against ../shared/crds.

RELIABILITY_EXAMPLES sets the number of clusters (default 500; more for a longer run), and
RELIABILITY_VALIDATE how many of them have everything they compose validated (default 150: one
validate call takes about 13 ms a resource; `all` for every one).
"""

import copy
import hashlib
import json
import os
import subprocess
import sys

from crossplane.function import logging, resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings

from function.fn import FunctionRunner
from function.serving import adoption
from tests.builders import provider_config, world_for
from tests.charts import converged, converged_examples
from tests.conftest import ROOT, TEST_NOW
from tests.sim.providers import observe
from tests.sim.workload import inference_gateway
from tests.strategies import clusters
from tests.validation import activated, managed_resource_definitions, validate_everything

EXAMPLES = int(os.environ.get("RELIABILITY_EXAMPLES", "500"))
_VALIDATE = os.environ.get("RELIABILITY_VALIDATE", "150")
VALIDATED = EXAMPLES if _VALIDATE == "all" else int(_VALIDATE)
PASSES = 4
SCHEMAS = (
    "inference-gateway-kind",
    "model-replicas-kind",
    "model-routes-kind",
    "model-caches-kind",
)
# What the draws produced, for the checks that run once over all of them.
DRAWN: list[dict] = []
COMPOSED: dict[str, dict] = {}
REQUESTS: list[bytes] = []
MANAGED: set[str] = set()

logging.configure(logging.Level.DISABLED)
RUNNER = FunctionRunner()


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return RUNNER.RunFunction(req)


def request(
    xr: dict, classes: list[dict], observed: dict[str, dict], status: dict
) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    body = copy.deepcopy(xr)
    if status:
        body["status"] = status
    req.observed.composite.resource.update(body)
    for c in classes:
        req.required_resources["inference-classes"].items.add().resource.update(c)
    config = provider_config(xr)
    if config:
        req.required_resources["cloud-provider-config"].items.add().resource.update(config)
    req.required_resources["inference-gateways"].items.add().resource.update(
        inference_gateway("fleet")
    )
    # Answered, empty: no consumer yet, and no node-feature-discovery on an Existing cluster.
    for key in ("model-replicas", "model-routes", "model-caches", NFD_FOUND):
        req.required_resources[key].SetInParent()
    for name in SCHEMAS:
        req.required_schemas[name].openapi_v3.update({"type": "object"})
    for key, seen in observed.items():
        req.observed.resources[key].resource.update(seen)
    return req


NFD_FOUND = adoption.members_key("node-feature-discovery")


def serialized(rsp: fnv1.RunFunctionResponse) -> bytes:
    return rsp.SerializeToString(deterministic=True)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(clusters())
def test_an_admitted_cluster_composes_without_fatal_and_deterministically(drawn):
    xr, classes = drawn
    world = world_for(xr)
    observed: dict[str, dict] = {}
    status: dict = {}
    for _ in range(PASSES):
        req = request(xr, classes, observed, status)
        rsp = run(req)
        fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        assert not fatal, f"{xr}\n{fatal}"
        # The same request, the same bytes.
        assert serialized(run(req)) == serialized(rsp)
        desired = {k: resource.struct_to_dict(r.resource) for k, r in rsp.desired.resources.items()}
        # A pass never drops what the one before composed (nothing changed in the spec).
        assert set(observed) <= set(desired), sorted(set(observed) - set(desired))
        observed = {}
        for key, body in desired.items():
            seen = copy.deepcopy(body)
            seen["status"] = observe(body, world).status
            observed[key] = seen
        status = resource.struct_to_dict(rsp.desired.composite.resource).get("status", {})
    if len([d for d in DRAWN if d["kind"] == "InferenceCluster"]) < VALIDATED:
        for body in desired.values():
            COMPOSED.setdefault(json.dumps(body, sort_keys=True), body)
    MANAGED.update(managed_resource_definitions(desired.values()))
    DRAWN.append(xr)
    DRAWN.extend(classes)
    if len(REQUESTS) < 40:
        REQUESTS.append(req.SerializeToString())


def test_everything_drawn_is_admitted_and_everything_composed_is_valid(
    crossplane, validate_cache, tmp_path
):
    assert len(DRAWN) >= EXAMPLES, "run with the generation test before this one"
    # Every drawn cluster and class is admitted; the composed resources of the first VALIDATED.
    count, report = validate_everything(
        crossplane, validate_cache, DRAWN + list(COMPOSED.values()), tmp_path
    )
    assert count >= len(COMPOSED)


def test_the_activation_policy_activates_exactly_the_managed_kinds_composed():
    """Every managed kind the drawn clusters and the examples compose is activated, and nothing
    else: a control plane with default activations off can serve every admitted cluster."""
    assert len(DRAWN) >= EXAMPLES, "run with the generation test before this one"
    composed = MANAGED | {
        name
        for example in converged_examples()
        for name in managed_resource_definitions(converged(example))
    }
    policy = activated()
    assert sorted(composed - policy) == [], "composed but not activated"
    assert sorted(policy - composed) == [], "activated but never composed"


# At the tests' clock (conftest.TEST_NOW), as the responses here are made: the same request and
# the same clock give the same bytes (a GPU health report's age is read against the clock).
HASH_RESPONSES = f"""
import datetime, hashlib, sys
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from function import clock
from function.fn import FunctionRunner
logging.configure(logging.Level.DISABLED)
runner = FunctionRunner()
with clock.fixed(datetime.datetime.fromisoformat({TEST_NOW.isoformat()!r})):
    for line in sys.stdin:
        req = fnv1.RunFunctionRequest.FromString(bytes.fromhex(line.strip()))
        rsp = runner.RunFunction(req)
        print(hashlib.sha256(rsp.SerializeToString(deterministic=True)).hexdigest())
"""


def test_responses_are_the_same_in_every_process_whatever_its_hash_seed():
    assert REQUESTS, "run with the generation test before this one"
    here = [
        hashlib.sha256(serialized(run(fnv1.RunFunctionRequest.FromString(r)))).hexdigest()
        for r in REQUESTS
    ]
    stdin = "".join(r.hex() + "\n" for r in REQUESTS)
    for seed in ("0", "1", "4242"):
        proc = subprocess.run(
            [sys.executable, "-c", HASH_RESPONSES],
            input=stdin,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            timeout=300,
        )
        assert proc.stdout.split() == here, f"PYTHONHASHSEED={seed} answered differently"
