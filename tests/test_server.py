"""The server under what a control plane (or an attacker on its network) can throw at it.

- mTLS: a client whose certificate another CA signed is refused like an anonymous one.
- 100 concurrent RunFunction calls are all answered, correctly.
- A malformed message gets a Fatal answer saying so, one over the receive limit is refused; the
  server answers the next call as before.
- SIGTERM lets calls in flight finish, then the process exits cleanly.
- The response for the largest cluster the XRD admits fits gRPC's default 4 MiB.
"""

import concurrent.futures
import gc
import os
import signal
import subprocess
import sys
import time

import grpc
import pytest
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format

from function import caches, fn, wire
from function.compose import compose_cluster
from function.fn import FunctionRunner
from function.output import Output
from tests.test_grpc import _cert, _pem, call, request, tls_dir  # noqa: F401 - fixture
from tests.tools import goorder
from tests.tools.bench import (
    Reconcile,
    example_case,
    fleet_of,
    run_reconcile,
    steady_state,
    tagged,
    worst_case,
)
from tests.tools.server import ROOT, free_port, function_server, wait_for_port

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
GRPC_DEFAULT_MAX = 4 * 1024 * 1024


def test_a_client_signed_by_another_ca_is_refused(tls_dir, tmp_path):  # noqa: F811
    other_key, other_ca = _cert("other-ca", None, None, ca=True)
    key, cert = _cert("intruder", other_key, other_ca.subject, ca=False)
    key_pem, crt_pem = _pem(key, cert)
    wrong = grpc.ssl_channel_credentials(
        root_certificates=(tls_dir / "ca.crt").read_bytes(),
        private_key=key_pem,
        certificate_chain=crt_pem,
    )
    with (
        function_server(f"--tls-certs-dir={tls_dir}", insecure=False) as server,
        grpc.secure_channel(server.target, wrong) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        call(channel, request())
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_hundred_concurrent_calls_are_all_answered_correctly():
    requests = [request(source) for source in ("existing", "eks", "gke", "aks") * 25]
    expected = {}
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        for req in requests[:4]:
            expected[req.observed.composite.resource["metadata"]["name"]] = call(channel, req)
        with concurrent.futures.ThreadPoolExecutor(max_workers=100) as pool:
            answers = list(pool.map(lambda r: call(channel, r), requests))
    assert len(answers) == 100
    for req, rsp in zip(requests, answers, strict=True):
        want = expected[req.observed.composite.resource["metadata"]["name"]]
        assert rsp.SerializeToString(deterministic=True) == want.SerializeToString(
            deterministic=True
        )


def test_malformed_and_oversized_messages_are_answered_and_the_server_lives_on():
    with (
        function_server("--max-recv-message-size=1") as server,
        grpc.insecure_channel(
            server.target, options=[("grpc.max_send_message_length", 8 * 1024 * 1024)]
        ) as channel,
    ):
        raw = channel.unary_unary(METHOD)  # bytes in, bytes out
        malformed = fnv1.RunFunctionResponse.FromString(
            raw(b"\xff\xff\xff\xff\x0f not a protobuf", timeout=10)
        )
        [fatal] = malformed.results
        assert fatal.severity == fnv1.SEVERITY_FATAL
        assert fatal.message.startswith("cannot decode the request's RunFunctionRequest: ")
        assert len(malformed.desired.resources) == 0
        with pytest.raises(grpc.RpcError) as oversized:
            raw(b"\x0a\x00" * (600 * 1024), timeout=10)
        assert oversized.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        rsp = call(channel, request())
        assert "provider-config-helm" in rsp.desired.resources
        assert os.waitpid(server.pid, os.WNOHANG) == (0, 0)  # still running


def test_sigterm_lets_calls_in_flight_finish():
    case = worst_case()
    req = steady_state(case)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "function", "--insecure", f"--address=127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, proc)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            stub.RunFunction(req, timeout=30)  # warm
            futures = [stub.RunFunction.future(req, timeout=30) for _ in range(20)]
            time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            answers = [f.result() for f in futures]
        assert all(len(a.requirements.resources) > 0 for a in answers)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_answers_are_byte_identical_whatever_the_function_remembers():
    """What is remembered by content (observed reads, required resources, encoded entries, shared
    bodies) never changes an answer: the same steady reconcile answered afresh, from warm
    caches, and after forgetting them gives the same bytes; a shared body is the very object a
    second reconcile returns."""
    logging.configure(logging.Level.DISABLED)
    case = worst_case()
    reconcile = Reconcile(steady_state(case), case.asked)
    runner = FunctionRunner()
    caches.forget()
    _, sent, fresh = run_reconcile(runner.answer, reconcile)
    assert [runner.answer(r) for r in sent][-1] == fresh
    caches.forget()
    assert [runner.answer(r) for r in sent][-1] == fresh
    xr, required = case.xr, {**case.bootstrap, **case.asked}
    observed = fn.observed(wire.Request(sent[-1]), xr)
    schemas = wire.Request(sent[-1]).installed_schemas
    once, again = (compose_cluster(xr, required, observed, schemas) for _ in range(2))
    shared = [k for k, d in once.resources.items() if d.shared]
    assert len(shared) > 50
    assert all(again.resources[k].body is once.resources[k].body for k in shared)


# Crossplane tags each request with a hash of its content; crossplane render sends none. Either
# way an answer must be what the function gives with nothing remembered.
TAGS = ["crossplane", "render"]


def reconciled_worst_case(tags: str) -> tuple[str, FunctionRunner, list[bytes], bytes]:
    """The worst case reconciled once in steady state, from empty caches, its requests tagged as
    tags sends them: its name, the runner, the requests sent and the last answer."""
    logging.configure(logging.Level.DISABLED)
    case = worst_case()
    runner = FunctionRunner()
    caches.forget()
    first = steady_state(case)
    if tags == "render":
        first.meta.ClearField("tag")
    _, sent, answer = run_reconcile(runner.answer, Reconcile(first, case.asked))
    return case.xr["metadata"]["name"], runner, sent, answer


def as_sent(req: fnv1.RunFunctionRequest, tags: str) -> bytes:
    """req changed, as tags sends it: Crossplane hashes its content anew."""
    return (tagged(req) if tags == "crossplane" else req).SerializeToString()


@pytest.mark.parametrize("tags", TAGS)
def test_answers_are_byte_identical_in_any_map_order(tags):
    """Crossplane marshals each map in a new order on every call: the same reconcile sent in
    other orders is answered with the same bytes, whatever the function remembers."""
    name, runner, sent, expected = reconciled_worst_case(tags)
    last = wire.Request(sent[-1])
    orders = {goorder.shuffled(sent[-1], seed) for seed in range(6)}
    assert len(orders) == 6
    # What was read of each observed resource is reused, though its bytes are new.
    read = dict(caches.SEEN.find(name).items)
    assert len(read) > 100 and read.keys() <= last.observed.keys()
    caches.TAGGED.clear()
    assert runner.answer(next(iter(orders))) == expected
    assert all(caches.SEEN.find(name).items[key][1] is r[1] for key, r in read.items())
    for data in orders:
        assert runner.answer(data) == expected
        caches.forget()
        assert runner.answer(data) == expected
    assert wire.Request(data).observed.keys() == last.observed.keys()


def test_a_tagged_steady_reconcile_is_answered_without_reading_what_it_observes():
    """Equal tags, equal requests: a reconcile Crossplane tags as before is answered with the
    same bytes without reading its composite or any observed resource again."""
    _, runner, sent, expected = reconciled_worst_case("crossplane")
    caches.COMPOSED.clear()
    caches.SEEN.clear()
    orders = [goorder.shuffled(data, seed) for seed in range(3) for data in sent]
    assert [runner.answer(data) for data in orders][-1] == expected
    assert len(caches.SEEN) == 0
    assert len(caches.COMPOSED) == 0


def test_answers_kept_by_tag_do_not_hold_their_compositions():
    """A cluster that keeps changing leaves a trail of tags behind: what is kept under them is the
    encoded answer, while the compositions the function keeps stay one per cluster and call."""
    _, runner, sent, _ = reconciled_worst_case("crossplane")
    for n in range(12):
        req = fnv1.RunFunctionRequest.FromString(sent[-1])
        change_observed(req, "vpc", lambda body, v=str(50000 + n): not_ready(body, v))
        assert not ready(runner.answer(as_sent(req, "crossplane")), "vpc")
    gc.collect()
    compositions = [o for o in gc.get_objects() if isinstance(o, Output)]
    assert len(caches.TAGGED) == 14
    assert len(compositions) <= 3


def test_a_tag_that_is_no_content_hash_vouches_for_nothing():
    """A hand-made request's tag (not Crossplane's SHA-256 of the request) is not trusted: two
    requests under the same such tag are each answered for what they hold."""
    _, runner, sent, _ = reconciled_worst_case("render")
    steady, changed = (fnv1.RunFunctionRequest.FromString(sent[-1]) for _ in range(2))
    vpc_creating(changed)
    for req in (steady, changed):
        req.meta.tag = "a-test"
    first, second = (runner.answer(r.SerializeToString()) for r in (steady, changed))
    assert ready(first, "vpc")
    assert not ready(second, "vpc")


def change_observed(req: fnv1.RunFunctionRequest, key: str, change) -> None:
    """Change the body of req's observed resource key."""
    body = json_format.MessageToDict(req.observed.resources[key].resource)
    change(body)
    req.observed.resources[key].resource.Clear()
    req.observed.resources[key].resource.update(body)


def not_ready(body: dict, resource_version: str | None = None) -> None:
    body["status"]["conditions"] = [
        {**c, "status": "False", "reason": "Unavailable"} if c["type"] == "Ready" else c
        for c in body["status"]["conditions"]
    ]
    if resource_version:
        body["metadata"]["resourceVersion"] = resource_version


@pytest.mark.parametrize("tags", TAGS)
@pytest.mark.parametrize("resource_version", ["48214", None], ids=["new-version", "same-version"])
def test_an_observed_resource_that_changes_is_read_again(resource_version, tags):
    """Observed resources are remembered by their version: one a provider changed is read anew,
    with its new resourceVersion, or (never so from the API server) under the same one but with
    another size."""
    _, runner, sent, steady = reconciled_worst_case(tags)
    key = "vpc"
    assert ready(steady, key)
    req = fnv1.RunFunctionRequest.FromString(sent[-1])
    change_observed(req, key, lambda body: not_ready(body, resource_version))
    assert not ready(runner.answer(as_sent(req, tags)), key)
    assert ready(runner.answer(sent[-1]), key)


def scaled(req: fnv1.RunFunctionRequest) -> None:
    """A spec change, written as the API server writes it: under a new resourceVersion."""
    composite = req.observed.composite.resource
    composite["spec"]["nodePools"][0]["maxNodeCount"] = 3
    composite["metadata"]["resourceVersion"] = "48214"


def zoned(req: fnv1.RunFunctionRequest) -> None:
    """A zone the cluster has no subnets in yet: the network and storage parts are made again."""
    composite = req.observed.composite.resource
    composite["spec"]["nodePools"][1]["zones"] = ["us-east-2d"]
    composite["metadata"]["resourceVersion"] = "48214"


def credentials_moved(req: fnv1.RunFunctionRequest) -> None:
    """Other credentials: every managed resource, the shared parts' too, names them."""
    composite = req.observed.composite.resource
    composite["spec"]["cluster"]["eks"]["credentials"] = {"name": "other"}
    composite["metadata"]["resourceVersion"] = "48214"


def classes_gone(req: fnv1.RunFunctionRequest) -> None:
    del req.required_resources["inference-classes"].items[:]


def vpc_creating(req: fnv1.RunFunctionRequest) -> None:
    change_observed(req, "vpc", lambda body: not_ready(body, "48214"))


def vpc_gone(req: fnv1.RunFunctionRequest) -> None:
    del req.observed.resources["vpc"]


def stray(req: fnv1.RunFunctionRequest) -> None:
    req.observed.resources["stray"].resource.update({"apiVersion": "v1", "kind": "ConfigMap"})


def kinds_gone(req: fnv1.RunFunctionRequest) -> None:
    for schema in req.required_schemas.values():
        schema.ClearField("openapi_v3")


@pytest.mark.parametrize("tags", TAGS)
@pytest.mark.parametrize(
    ("change", "shows"),
    [
        (scaled, True),
        (zoned, True),
        (credentials_moved, True),
        (classes_gone, True),
        (vpc_creating, True),
        (vpc_gone, True),
        (stray, False),
        (kinds_gone, True),
    ],
)
def test_a_kept_composition_is_answered_only_for_what_it_was_made_from(change, shows, tags):
    """The function keeps each composition with what it was made from: a request that differs in
    the composite, a required resource, an observed resource or its names, or the installed kinds
    is composed afresh, the answer the same as with nothing remembered."""
    _, runner, sent, steady = reconciled_worst_case(tags)
    req = fnv1.RunFunctionRequest.FromString(sent[-1])
    change(req)
    data = as_sent(req, tags)
    warm = runner.answer(data)
    caches.forget()
    assert runner.answer(data) == warm
    assert (untagged(warm) != untagged(steady)) == shows
    assert runner.answer(sent[-1]) == steady


def test_classes_resolved_follows_the_classes_whatever_is_kept_or_written_back():
    """Once the classes are deleted, every reconcile answers ClassesResolved=False: under each new
    tag, in any map order, whatever the caches kept of the reconciles with the classes, and
    whatever Crossplane v2.2.1 writes back into the XR's conditions from its informer cache (the
    old True among them: crossplane/crossplane#7062, the e2e flake of issue 25)."""
    logging.configure(logging.Level.DISABLED)
    case = worst_case()
    runner = FunctionRunner()
    caches.forget()
    first = steady_state(case)
    _, _, steady = run_reconcile(runner.answer, Reconcile(first, case.asked))
    assert verdict(steady) == (fnv1.STATUS_CONDITION_TRUE, "Resolved")
    old = {"type": "ClassesResolved", "status": "True", "reason": "Resolved"}
    for n, shown in enumerate([old, {**old, "status": "False", "reason": "ClassNotFound"}, old]):
        req = fnv1.RunFunctionRequest()
        req.CopyFrom(first)
        classes_gone(req)
        composite = req.observed.composite.resource
        composite["metadata"]["resourceVersion"] = str(49000 + n)
        composite["status"]["conditions"] = [
            {**shown, "lastTransitionTime": "2026-11-30T10:00:00Z"}
        ]
        _, sent, last = run_reconcile(runner.answer, Reconcile(tagged(req), case.asked))
        assert verdict(last) == (fnv1.STATUS_CONDITION_FALSE, "ClassNotFound")
        assert verdict(runner.answer(goorder.shuffled(sent[-1], n))) == verdict(last)


def verdict(answer: bytes) -> tuple[int, str]:
    [shown] = [
        c
        for c in fnv1.RunFunctionResponse.FromString(answer).conditions
        if c.type == "ClassesResolved"
    ]
    return shown.status, shown.reason


def gateway_gone(req: fnv1.RunFunctionRequest) -> None:
    del req.required_resources["inference-gateways"].items[:1]


def consumers_unasked(req: fnv1.RunFunctionRequest) -> None:
    del req.required_resources["model-replicas"]


def without_capabilities(req: fnv1.RunFunctionRequest) -> None:
    del req.meta.capabilities[:]


@pytest.mark.parametrize(
    ("change", "call"),
    [(gateway_gone, -1), (consumers_unasked, -1), (kinds_gone, -1), (without_capabilities, 0)],
)
def test_a_tag_vouches_only_for_what_crossplane_hashed(change, call):
    """Crossplane hashes a request before its requirements loop fetches anything, and its later
    calls keep that tag: a call under a known tag whose fetched resources, schemas or
    capabilities differ is answered as with nothing remembered."""
    _, runner, sent, _ = reconciled_worst_case("crossplane")
    before = runner.answer(sent[call])
    req = fnv1.RunFunctionRequest.FromString(sent[call])
    change(req)
    data = req.SerializeToString()
    warm = runner.answer(data)
    caches.forget()
    assert runner.answer(data) == warm
    assert warm != before
    assert runner.answer(sent[call]) == before


def untagged(answer: bytes) -> fnv1.RunFunctionResponse:
    """The answer without the request's tag it echoes."""
    rsp = fnv1.RunFunctionResponse.FromString(answer)
    rsp.meta.ClearField("tag")
    return rsp


def ready(answer: bytes, key: str) -> bool:
    rsp = fnv1.RunFunctionResponse.FromString(answer)
    return rsp.desired.resources[key].ready == fnv1.READY_TRUE


def mixed_fleet(each: int) -> list[Reconcile]:
    """each clusters of three shapes (the largest, Existing, Vultr), interleaved."""
    shapes = [fleet_of(case, each) for case in (worst_case(), example_case("existing"))]
    shapes.append(fleet_of(example_case("vultr"), each))
    fleet = [rc for members in zip(*shapes, strict=True) for rc in members]
    for rc in fleet:
        rc.orders = 3  # each call in a new map order, as Crossplane marshals it
    return fleet


@pytest.mark.parametrize("kind", ["steady", "new-tag"])
@pytest.mark.parametrize("budget", [256 * 1024, 512 * 1024 * 1024], ids=["starved", "roomy"])
def test_a_fleet_is_answered_as_with_nothing_remembered(budget, kind, monkeypatch):
    """A control plane's clusters reconciled round robin, each request in a new map order, with
    a budget that holds the whole fleet or not a tenth of one cluster's entries: every answer is
    the one the function gives with nothing remembered, and the budget holds. With new tags
    (as after a write to what the composition does not read) the compositions, observed and
    required resources kept for each cluster are what answers."""
    logging.configure(logging.Level.DISABLED)
    monkeypatch.setattr(caches.STORE, "budget", budget)
    runner = FunctionRunner()
    fleet = mixed_fleet(3)
    expected = {}
    for i, rc in enumerate(fleet):
        _, sent, _ = run_reconcile(runner.answer, rc)
        for n, data in enumerate(sent):
            caches.forget()
            expected[i, n] = runner.answer(data)
    caches.forget()
    for _ in range(3):
        for i, rc in enumerate(fleet):
            if kind == "new-tag":
                caches.TAGGED.clear()
            got: list[bytes] = []
            _, sent, _ = run_reconcile(lambda data, got=got: keep(got, runner.answer(data)), rc)
            assert caches.STORE.held <= budget
            assert got == [expected[i, n] for n in range(len(sent))]
    if budget > 1 << 20:
        assert len(caches.COMPOSED) == 2 * len(fleet)


def keep(answers: list[bytes], answer: bytes) -> bytes:
    answers.append(answer)
    return answer


def test_a_cluster_no_longer_reconciled_leaves_nothing_behind(monkeypatch):
    """Crossplane never calls a function for an XR being deleted, but calls for every live one at
    least every few minutes: once no call has used them for the idle time, the answers, the
    compositions and the observed resources of a cluster that is gone are dropped; a live
    cluster's stay."""
    logging.configure(logging.Level.DISABLED)
    now = [0.0]
    monkeypatch.setattr(caches.STORE, "clock", lambda: now[0])
    runner = FunctionRunner()
    gone, live = fleet_of(worst_case(), 2)
    caches.forget()
    run_reconcile(runner.answer, gone)
    for minute in range(1, 12):
        now[0] = 60.0 * minute
        run_reconcile(runner.answer, live)
    grouped = (caches.SEEN, caches.NAMES, caches.USAGES, caches.BODIES, caches.PARTS)
    names = {k for g in grouped for k in g._items} | {k[0] for k in caches.COMPOSED._items}
    assert names == {"eks-worst-0001"}
    assert len(caches.TAGGED) == 2  # the live cluster's two calls


def test_the_largest_admitted_cluster_answers_within_the_grpc_default():
    """Eight pools of EKS Capacity Blocks with EFA on the Dynamo stack, in steady state, every
    optional field at its limit: the answer must fit what Crossplane's client accepts."""
    case = worst_case()
    for i, pool in enumerate(case.xr["spec"]["nodePools"]):
        pool["name"] = f"{i}-" + "p" * 38
    case.xr["metadata"]["name"] = "c" * 63
    case.xr["spec"]["placement"] = {
        "metadata": {"labels": {f"l{i}.example.com/" + "k" * 60: "v" * 63 for i in range(16)}}
    }
    case.xr["spec"]["taints"] = [
        {"key": f"t{i}.example.com/" + "k" * 60, "value": "v" * 63, "effect": "NoSchedule"}
        for i in range(32)
    ]
    logging.configure(logging.Level.DISABLED)
    reconcile = Reconcile(steady_state(case), case.asked)
    _, _, answer = run_reconcile(FunctionRunner().answer, reconcile)
    rsp = fnv1.RunFunctionResponse.FromString(answer)
    size = len(answer)
    print(f"largest admitted response: {size} bytes ({size / GRPC_DEFAULT_MAX:.1%} of 4 MiB)")
    assert len(rsp.desired.resources) > 150
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert size < GRPC_DEFAULT_MAX
