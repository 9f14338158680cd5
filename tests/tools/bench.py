"""make bench: how fast the function answers whole reconciles, and what its server holds.

Each case is a cluster in steady state, as Crossplane's requirements loop calls the function for
it: the first call carries what the Composition hands over up front (InferenceClasses, the
schemas of the fleet's kinds), the function asks for the rest (InferenceGateways, consumers, a
cloud ProviderConfig), and the second call composes. Every composed resource is observed Ready
with the metadata the API server keeps (managedFields included), as the providers would report it.

Per case: composed resources; request and response bytes; a reconcile's median and p90
in-process and over gRPC (server on loopback), all rounds included; the same over gRPC from a
server that answers without the function (tests/tools/echo.py: the floor), each of its reconciles
right after one of the function's; calls per reconcile;
throughput with 8 concurrent callers; the ratio of the median to the pure protobuf cost of parsing
the requests and serialising the responses. Then the server's peak RSS and its cold start to a
first answer. Then the fleet column: N distinct clusters of the worst case (N = 1, 64, 256) and of
Existing (1, 1000), reconciled round robin from Go through a fresh server, each request marshalled
afresh; per fleet the median and p90 over gRPC and against one cluster's, in-process the steady
median and the median with each composition made again, and the server's peak RSS (`--only
cases|fleet` runs one table). Exits non-zero when a target is missed. `--profile
steady|new-tag|made` prints the top costs of the worst case with pyinstrument. Never part of the
tests.

Crossplane tags each request with a hash of its content, and the function keeps its answers by
tag; it also remembers what it read and wrote, which a steady cluster repeats on every reconcile,
and keeps each composition with what it was made from. "new tag" is a reconcile in-process whose
requests are not known by their tag (as after a write to anything in them the composition does
not read); "made" one whose composition is made again (as after any change to the cluster, its
classes or what it reads of what is observed); "cold" one with every cache emptied first: what a
control plane with more clusters than the caches hold sees.

Crossplane marshals every request afresh, and Go writes each map (a Struct's fields, the observed
resources) in a random order: the same content rarely comes in the same bytes twice. Every caller
here sends each request in one of several map orders, in turn, so nothing is measured that only
identical bytes would make fast. The observed and required resources carry a uid and a
resourceVersion, as read from the API server.

Over gRPC, the caller is Go, as Crossplane is: tests/tools/benchclient runs the requirements loop
with requests prepared here (make bench builds it), marshalling them as Crossplane does. A Python
caller's median is shown beside it, for comparison: its own protobuf and gRPC work is not the
function's. The server runs on one core, the callers (and the in-process runs) on the other.
"""

import argparse
import base64
import contextlib
import copy
import hashlib
import json
import marshal
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor

from function import caches, wire
from function.compose import compose_cluster
from function.fn import FunctionRunner
from function.inputs import Observed, ObservedResource
from function.server import tune_gc
from tests.builders import example, provider_configs
from tests.sim.providers import World, observe
from tests.sim.workload import inference_gateway
from tests.tools import goorder
from tests.tools.server import ROOT, free_port, function_server, wait_for_port

# Targets on a 2-core machine. Crossplane shares a 2-minute budget across every step and every
# requirements round of a reconcile, and runs up to 100 reconciles at once.
WORST = "eks-8-pools-dynamo"
TARGETS = {
    f"{WORST} reconcile over gRPC, median (ms)": 5.0,
    "existing reconcile over gRPC, median (ms)": 2.0,
    "server peak RSS (MiB)": 80.0,
    "cold start to first answer (s)": 1.5,
}
RECONCILES = 200
# Map orders each request is sent in (Crossplane marshals maps in a random order).
ORDERS = 8
SERVER_CORE, CALLER_CORE = 1, 0
CONCURRENCY = 8
THROUGHPUT_SECONDS = 3.0
GO_CLIENT = ROOT / ".tools" / "bin" / "benchclient"
SCHEMAS = (
    "inference-gateway-kind",
    "model-replicas-kind",
    "model-routes-kind",
    "model-caches-kind",
)
RESERVATION = "cr-0{:016x}"


@dataclass
class Case:
    name: str
    xr: dict
    # What the Composition hands over up front, and what the function asks for on top.
    bootstrap: dict[str, list[dict]]
    asked: dict[str, list[dict]]
    world: World = field(default_factory=World)


def steady_state(case: Case) -> fnv1.RunFunctionRequest:
    """The first call's request of a reconcile of a cluster whose every resource is Ready."""
    required = {**case.bootstrap, **case.asked}
    schemas = dict.fromkeys(SCHEMAS, True)
    out = compose_cluster(case.xr, required, Observed(), schemas)
    for _ in range(25):
        seen = {k: ObservedResource(reported(d.body, case.world)) for k, d in out.resources.items()}
        again = compose_cluster(case.xr, required, Observed(seen, out.status), schemas)
        if again.resources == out.resources and again.status == out.status:
            break
        out = again
    req = fnv1.RunFunctionRequest()
    req.meta.capabilities.extend(
        [
            fnv1.CAPABILITY_CAPABILITIES,
            fnv1.CAPABILITY_REQUIRED_RESOURCES,
            fnv1.CAPABILITY_REQUIRED_SCHEMAS,
            fnv1.CAPABILITY_CONDITIONS,
        ]
    )
    name = case.xr["metadata"]["name"]
    xr = with_server_metadata(copy.deepcopy(case.xr), "", name)
    xr["status"] = out.status
    req.observed.composite.resource.update(xr)
    for key, desired in out.resources.items():
        body = with_server_metadata(reported(desired.body, case.world), key, name)
        req.observed.resources[key].resource.update(body)
    for key, items in case.bootstrap.items():
        for item in items:
            req.required_resources[key].items.add().resource.update(stored(item))
    for schema in SCHEMAS:
        req.required_schemas[schema].openapi_v3.update({"type": "object"})
    return tagged(req)


def tagged(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionRequest:
    """req with the tag Crossplane gives it before its first call: a SHA-256 of the request
    without its meta, marshalled deterministically (Tag in Crossplane's composition_functions.go).
    The requirements loop's later calls keep it."""
    untagged = fnv1.RunFunctionRequest()
    untagged.CopyFrom(req)
    untagged.ClearField("meta")
    req.meta.tag = hashlib.sha256(untagged.SerializeToString(deterministic=True)).hexdigest()
    return req


def reported(body: dict, world: World) -> dict:
    seen = copy.deepcopy(body)
    report = observe(body, world)
    seen["status"] = report.status
    if report.external_name:
        seen["metadata"].setdefault("annotations", {})["crossplane.io/external-name"] = (
            report.external_name
        )
    return seen


def stored(body: dict) -> dict:
    """body as the API server keeps it: with an id and a version (a required resource)."""
    body = copy.deepcopy(body)
    name = body.get("metadata", {}).get("name", "")
    body.setdefault("metadata", {}).update(
        uid=f"0c5d7e9a-0000-4000-8000-{zlib.crc32(name.encode()):012d}",
        resourceVersion="31877",
        generation=1,
        creationTimestamp="2026-11-30T09:00:00Z",
    )
    return body


def uid(composite: str, key: str) -> str:
    """The uid the API server gave composite's resource key ("" for the composite itself): every
    cluster of a fleet has its own."""
    return f"6b1e4c2a-0000-4000-8000-{zlib.crc32(f'{composite}/{key}'.encode()):012d}"


def with_server_metadata(body: dict, key: str, composite: str) -> dict:
    """What the API server and Crossplane add: ids, versions, owner, and managedFields for
    Crossplane's apply and the provider's status updates."""
    meta = body.setdefault("metadata", {})
    meta.update(
        uid=uid(composite, key),
        resourceVersion="48213",
        generation=3,
        creationTimestamp="2026-11-30T10:00:00Z",
    )
    meta.setdefault("labels", {})["crossplane.io/composite"] = composite
    meta.setdefault("annotations", {})["crossplane.io/composition-resource-name"] = key
    meta["ownerReferences"] = [
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceCluster",
            "name": composite,
            "uid": uid(composite, ""),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    meta["managedFields"] = [
        {
            "manager": "apiextensions.crossplane.io/composed/bench",
            "operation": "Apply",
            "apiVersion": body.get("apiVersion", "v1"),
            "time": "2026-11-30T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(body.get("spec", {}), "f:spec"),
        },
        {
            "manager": "provider",
            "operation": "Update",
            "apiVersion": body.get("apiVersion", "v1"),
            "time": "2026-11-30T10:05:00Z",
            "fieldsType": "FieldsV1",
            "subresource": "status",
            "fieldsV1": fields_v1(body.get("status", {}), "f:status"),
        },
    ]
    return body


def fields_v1(value: object, name: str) -> dict:
    if isinstance(value, dict):
        return {name: {f"f:{k}": fields_v1(v, f"f:{k}")[f"f:{k}"] for k, v in value.items()}}
    return {name: {}}


# --- the cases -----------------------------------------------------------------------------------


def fleet() -> dict[str, list[dict]]:
    return {
        "inference-gateways": [inference_gateway("fleet-a"), inference_gateway("fleet-b")],
        "model-replicas": [],
        "model-routes": [],
        "model-caches": [],
    }


def example_case(name: str, world: World | None = None) -> Case:
    xr, classes = example(name)
    asked = fleet()
    configs = provider_configs(name)
    if configs:
        asked["cloud-provider-config"] = configs
    return Case(name, xr, {"inference-classes": classes}, asked, world or World())


def worst_case() -> Case:
    """EKS, 8 pools, EFA and Capacity Blocks on half of them, the Dynamo stack."""
    xr, classes = example("eks")
    _, more = example("eks-on-demand")
    xr["metadata"]["name"] = "eks-worst"
    xr["spec"]["stack"] = "Dynamo"
    pools, reservations = [], {}
    for i in range(8):
        if i % 2 == 0:
            reservation = RESERVATION.format(i)
            zone = f"us-east-2{'abc'[i % 3]}"
            reservations[reservation] = {
                "availabilityZone": zone,
                "instanceType": "p5en.48xlarge",
                "instanceCount": 2,
            }
            pools.append(
                {
                    "name": f"h200-{i}",
                    "className": classes[0]["metadata"]["name"],
                    "nodeCount": 2,
                    "minNodeCount": 2,
                    "maxNodeCount": 2,
                    "zones": [zone],
                    "capacityBlock": {"capacityReservationId": reservation},
                    "fabric": {"type": "EFA"},
                }
            )
        else:
            pools.append(
                {
                    "name": f"l40s-{i}",
                    "className": more[1]["metadata"]["name"],
                    "minNodeCount": 0,
                    "maxNodeCount": 4,
                }
            )
    xr["spec"]["nodePools"] = pools
    return Case(
        WORST,
        xr,
        {"inference-classes": classes + more},
        fleet(),
        World(capacity_reservations=reservations),
    )


def cases() -> list[Case]:
    blocks = World(
        capacity_reservations={
            "cr-0123456789abcdef0": {
                "availabilityZone": "us-east-2b",
                "instanceType": "p5en.48xlarge",
                "instanceCount": 2,
            }
        }
    )
    named = ["existing", "existing-dynamo", "eks-on-demand", "gke", "aks", "nebius", "vultr"]
    return [example_case(n) for n in named] + [example_case("eks", blocks), worst_case()]


# --- measuring -----------------------------------------------------------------------------------


# Crossplane (Go) builds and reads the messages itself: the bench's client works in bytes, so
# Python protobuf on the client side is not counted against the function. Of an answer, the loop
# reads only its requirements (RunFunctionResponse field 5), as a lean upb message.
_REQUIREMENTS_ONLY = fnv1.RunFunctionResponse.DESCRIPTOR.fields_by_name["requirements"].number
assert _REQUIREMENTS_ONLY == 5


def requirements_of(answer: bytes) -> bytes:
    """The requirements field of a serialised RunFunctionResponse, re-encoded deterministically."""
    return fnv1.Requirements.FromString(_requirements_field(answer)).SerializeToString(
        deterministic=True
    )


def _requirements_field(data: bytes) -> bytes:
    """Concatenated payloads of field 5, skipping every other field without parsing it."""
    out, i = bytearray(), 0
    while i < len(data):
        key, i = wire.read_varint(data, i)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, i = wire.read_varint(data, i)
        elif wire_type == 2:
            size, i = wire.read_varint(data, i)
            if number == _REQUIREMENTS_ONLY:
                out += data[i : i + size]
            i += size
        elif wire_type in (1, 5):
            i += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
    return bytes(out)


@dataclass
class Reconcile:
    """One reconcile's first request, and what Crossplane fetches when the function asks."""

    first: fnv1.RunFunctionRequest
    asked: dict[str, list[dict]]
    # Answers already built and serialised, by requirements: that is Crossplane's work, not timed.
    answers: dict[bytes, bytes] = field(default_factory=dict)
    # Each request in ORDERS map orders, as Crossplane marshals it, sent in turn.
    reordered: dict[bytes, list[bytes]] = field(default_factory=dict)
    turn: int = 0
    orders: int = ORDERS

    def __post_init__(self) -> None:
        self.first_bytes = self.first.SerializeToString()

    def as_sent(self, request: bytes) -> bytes:
        """request in the next of its map orders (goorder); as it is with no orders."""
        if not self.orders:
            return request
        if request not in self.reordered:
            self.reordered[request] = [
                goorder.shuffled(request, seed) for seed in range(self.orders)
            ]
        self.turn += 1
        return self.reordered[request][self.turn % self.orders]

    def answer(self, requirements: bytes) -> bytes:
        if requirements not in self.answers:
            req = fnv1.RunFunctionRequest()
            req.CopyFrom(self.first)
            for name in fnv1.Requirements.FromString(requirements).resources:
                target = req.required_resources[name]
                target.SetInParent()
                for item in self.asked.get(name, []):
                    target.items.add().resource.update(stored(item))
            self.answers[requirements] = req.SerializeToString()
        return self.answers[requirements]


def steps_of(reconcile: Reconcile, call) -> dict[bytes, bytes]:
    """The request Crossplane sends next after each requirements the function answers with (raw,
    as the Go client sees them)."""
    req, previous, steps = reconcile.first_bytes, None, {}
    while True:
        raw = _requirements_field(call(req))
        if raw == previous:
            return steps
        previous = raw
        req = steps[raw] = reconcile.answer(raw)


def go_case(name: str, reconcile: Reconcile, call) -> dict:
    """A case as the Go client reads it: the first request, and the next ones (steps_of)."""
    steps = steps_of(reconcile, call)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "name": name,
        "first": b64(reconcile.first_bytes),
        "next": [{"requirements": b64(k), "request": b64(v)} for k, v in steps.items()],
    }


def over_grpc_from_go(
    target: str, echo: str, cases: list[dict], reconciles: int, seconds: float = THROUGHPUT_SECONDS
) -> dict[str, dict]:
    """Each case's calls, median, p90 and throughput, as the Go client measured them, and the
    echo's median, timed in turn with the function's."""
    if not GO_CLIENT.exists():
        raise SystemExit(f"{GO_CLIENT} is missing: run `make bench`, which builds it")
    job = {
        "descriptors": base64.b64encode(descriptors(fnv1.DESCRIPTOR)).decode(),
        "target": target,
        "echo": echo,
        "reconciles": reconciles,
        "concurrency": CONCURRENCY,
        "seconds": seconds,
        "cases": cases,
    }
    out = subprocess.run(
        [str(GO_CLIENT)], input=json.dumps(job).encode(), capture_output=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"benchclient failed: {out.stderr.decode().strip()}")
    return {r["name"]: r for r in json.loads(out.stdout)}


@contextlib.contextmanager
def echo_server(answers: dict[int, bytes]) -> Iterator[str]:
    """The target of tests/tools/echo.py answering with answers (by request size)."""
    with tempfile.NamedTemporaryFile() as file:
        file.write(marshal.dumps(answers))
        file.flush()
        port = free_port()
        address = f"127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tools.echo", f"--address={address}", file.name],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, proc)
            yield address
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def answers_by_size(reconciles: dict[str, Reconcile], call) -> dict[int, bytes]:
    """The answer to every request of every reconcile, by the request's size (which no map order
    changes), for the echo server."""
    answers: dict[int, bytes] = {}
    for reconcile in reconciles.values():
        _, sent, _ = run_reconcile(call, reconcile)
        for request in sent:
            answer = call(request)
            if answers.setdefault(len(request), answer) != answer:
                raise SystemExit(f"two requests of {len(request)} bytes: the echo cannot tell them")
    return answers


def descriptors(file: FileDescriptor) -> bytes:
    """A FileDescriptorSet of file and every file it imports, for the Go client to marshal
    RunFunctionRequests as Crossplane does."""
    out, seen = descriptor_pb2.FileDescriptorSet(), set()

    def add(f: FileDescriptor) -> None:
        if f.name not in seen:
            seen.add(f.name)
            for dependency in f.dependencies:
                add(dependency)
            f.CopyToProto(out.file.add())

    add(file)
    return out.SerializeToString()


def run_reconcile(call, reconcile: Reconcile) -> tuple[int, list[bytes], bytes]:
    """Call as Crossplane's requirements loop does, until the requirements repeat: the number of
    calls, the requests sent (each in a new map order, as Crossplane marshals them) and the last
    answer, all serialised."""
    req, previous, sent = reconcile.first_bytes, None, []
    while True:
        sent.append(reconcile.as_sent(req))
        rsp = call(sent[-1])
        requirements = requirements_of(rsp)
        if requirements == previous:
            return len(sent), sent, rsp
        previous = requirements
        req = reconcile.answer(requirements)


def raw_stub(channel: grpc.Channel):
    """RunFunction over channel, bytes in and bytes out."""
    return channel.unary_unary("/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction")


@contextlib.contextmanager
def own_core(core: int) -> Iterator[None]:
    """Run this process (and what it starts) on one core while inside, when there are two:
    the server on one, its caller on the other, as Crossplane and a function run in pods of their
    own, instead of both contending for either core."""
    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        yield
        return
    os.sched_setaffinity(0, {sorted(cores)[core]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)


def timed_after(forget, call, reconcile: Reconcile, n: int) -> list[float]:
    """Reconciles in-process, each after forget() (not timed)."""
    samples = []
    for _ in range(n):
        forget()
        samples += timed(lambda: run_reconcile(call, reconcile), 1)
    return samples


def timed(work, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        work()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cold_start(reconcile: Reconcile) -> float:
    """Seconds from starting `python -m function` to its first complete answer."""
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "function", "--insecure", f"--address=127.0.0.1:{port}"],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc, timeout=30, interval=0.005)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = raw_stub(channel)
            run_reconcile(lambda r: call(r, timeout=30, wait_for_ready=True), reconcile)
        return time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- fleets --------------------------------------------------------------------------------------

# N distinct clusters of a case, as N XRs of one control plane (their own names, hence their own
# resource names, uids and tags), reconciled round robin: what every cache must hold for the
# fast path to serve them all. The largest shape up to 256 clusters, Existing (the smallest) up
# to 1000. Timed rounds per size, after a first round that fills the caches.
FLEETS = ((WORST, (1, 64, 256)), ("existing", (1, 1000)))
FLEET_ROUNDS = {1: 200, 64: 6, 256: 3, 1000: 2}
# In-process, a fleet's requests go as Python marshals them: goorder takes half a second for one of
# the largest requests, and the caches know observed resources by version, not bytes, so a repeated
# order is no shortcut. Over gRPC the Go client marshals each request afresh every reconcile.
FLEET_ORDERS = 0
FLEET_TARGETS = {
    f"{WORST} x256 over gRPC, median / x1 median": 2.0,
    # The function's share of a reconcile at 256 clusters, against the transport of the same
    # requests (the echo's median, requests marshalled afresh as the function's were).
    f"{WORST} x256 over gRPC, median / echo median": 1.5,
    f"{WORST} x256 composition made again in-process, median (ms)": 3.5,
    f"{WORST} x256 server peak RSS (MiB)": 400.0,
    "existing x1000 server peak RSS (MiB)": 1024.0,
}


def fleet_of(case: Case, n: int) -> list[Reconcile]:
    """n clusters of case, each named after it and numbered."""
    out = []
    for i in range(n):
        member = copy.deepcopy(case)
        member.xr["metadata"]["name"] = f"{case.xr['metadata']['name']}-{i:04d}"
        out.append(Reconcile(steady_state(member), member.asked, orders=FLEET_ORDERS))
    return out


def write_fleet(path: Path, fleet: list[Reconcile], call) -> dict[int, bytes]:
    """The fleet as the Go client's -fleet reads it (length-prefixed, little endian), and for the
    echo an answer of the function's by each request's size (one cluster's, where several send
    requests of one size: the transport is what the echo measures)."""

    def chunk(data: bytes) -> bytes:
        return struct.pack("<I", len(data)) + data

    answers: dict[int, bytes] = {}
    with path.open("wb") as out:
        out.write(struct.pack("<I", len(fleet)))
        for reconcile in fleet:
            steps = steps_of(reconcile, call)
            out.write(chunk(reconcile.first_bytes) + struct.pack("<I", len(steps)))
            for requirements, request in steps.items():
                out.write(chunk(requirements) + chunk(request))
            for request in (reconcile.first_bytes, *steps.values()):
                if len(request) not in answers:
                    answers[len(request)] = call(request)
    return answers


def fleet_in_process(fleet: list[Reconcile], call, rounds: int, forget) -> list[float]:
    """Reconciles round robin, each after forget() (not timed), after one round that is not
    timed."""
    samples = []
    for round_ in range(rounds + 1):
        for reconcile in fleet:
            forget()
            start = time.perf_counter()
            run_reconcile(call, reconcile)
            if round_:
                samples.append((time.perf_counter() - start) * 1000)
    return samples


def fleet_over_grpc(path: Path, rounds: int, answers: dict[int, bytes]) -> tuple[dict, float]:
    """The Go client's fleet figures from a fresh server (and the echo's, with answers), and the
    server's peak RSS."""
    job = {
        "descriptors": base64.b64encode(descriptors(fnv1.DESCRIPTOR)).decode(),
        "rounds": rounds,
    }
    with (
        own_core(SERVER_CORE),
        function_server() as server,
        echo_server(answers) as echo,
        own_core(CALLER_CORE),
    ):
        job["target"], job["echo"] = server.target, echo
        out = subprocess.run(
            [str(GO_CLIENT), "-fleet", str(path)],
            input=json.dumps(job).encode(),
            capture_output=True,
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(f"benchclient failed: {out.stderr.decode().strip()}")
        return json.loads(out.stdout), peak_rss_mib(server.pid)


def fleets(results: dict[str, float]) -> None:
    """The fleet column: per case and size, over gRPC (p50/p90, and the p50 against one
    cluster's), in-process (steady, and with each composition made again, also per composed
    resource) and the server's peak RSS (and what each cluster beyond the first adds to it, also
    per composed resource): so a change that adds resources and one that makes each dearer can
    be told apart."""
    print(
        f"\n{'fleet':20} {'clusters':>8} {'res':>4} {'gRPC p50/p90 ms':>16} {'x one':>6} "
        f"{'echo p50':>8} {'x echo':>6} "
        f"{'in-proc p50':>11} {'made p50':>8} {'us/res':>6} {'peak RSS MiB':>12} "
        f"{'KiB/cluster':>11} {'KiB/res':>7}"
    )
    by_name = {c.name: c for c in cases()}
    call = FunctionRunner().answer
    for name, sizes in FLEETS:
        one = alone = None
        for n in sizes:
            caches.forget()
            fleet = fleet_of(by_name[name], n)
            rounds = FLEET_ROUNDS[n]
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "fleet.bin"
                answers = write_fleet(path, fleet, call)
                _, _, answer = run_reconcile(call, fleet[0])
                resources = len(fnv1.RunFunctionResponse.FromString(answer).desired.resources)
                with own_core(CALLER_CORE):  # as the cases' in-process runs
                    steady = fleet_in_process(fleet, call, max(rounds // 4, 1), lambda: None)
                    made = fleet_in_process(fleet, call, max(rounds // 4, 1), FORGETS["made"])
                del fleet
                caches.forget()
                measured, rss = fleet_over_grpc(path, rounds, answers)
                del answers
            median = measured["median_ms"]
            one, alone = one or median, alone or rss
            held = (rss - alone) * 1024 / (n - 1) if n > 1 else None
            made_median = statistics.median(made)
            key = f"{name} x{n}"
            echo = measured["echo_median_ms"]
            results[f"{key} over gRPC, median / x1 median"] = median / one
            results[f"{key} over gRPC, median / echo median"] = median / echo
            results[f"{key} composition made again in-process, median (ms)"] = made_median
            results[f"{key} server peak RSS (MiB)"] = rss
            each = f"{held:>11.0f} {held / resources:>7.2f}" if held is not None else f"{'':>19}"
            print(
                f"{name:20} {n:>8} {resources:>4} {median:>7.2f}/{measured['p90_ms']:<8.2f} "
                f"{median / one:>6.2f} {echo:>8.2f} {median / echo:>6.2f} "
                f"{statistics.median(steady):>11.2f} "
                f"{made_median:>8.2f} {made_median * 1000 / resources:>6.1f} {rss:>12.1f} "
                f"{each}",
                flush=True,
            )


# What each kind of reconcile forgets first (not timed).
FORGETS = {
    "steady": lambda: None,
    "new-tag": caches.TAGGED.clear,
    "made": lambda: (caches.TAGGED.clear(), caches.COMPOSED.clear()),
    "cold": caches.forget,
}


def profile(reconcile: Reconcile, forget) -> None:
    from pyinstrument import Profiler  # noqa: PLC0415 - only for --profile

    answer = FunctionRunner().answer
    profiler = Profiler(interval=0.0002)

    def call(request: bytes) -> bytes:  # only the function's time: not the requests' shuffling
        profiler.start()
        try:
            return answer(request)
        finally:
            profiler.stop()

    for _ in range(100):
        forget()
        run_reconcile(call, reconcile)
    print(profiler.output_text(unicode=False, color=False, show_all=False))


def each_case(results: dict[str, float], reconciles_each: int) -> None:
    """The cases' table: each case alone, in-process and over gRPC, and the server's peak RSS
    and cold start."""
    reconciles = {c.name: Reconcile(steady_state(c), c.asked) for c in cases()}
    in_process = FunctionRunner().answer
    header = (
        f"{'case':20} {'res':>4} {'req KiB':>8} {'rsp KiB':>8} {'calls':>5} "
        f"{'in-proc p50/p90 ms':>18} {'new tag':>8} {'made p50':>8} {'us/res':>6} {'cold p50':>8} "
        f"{'gRPC p50/p90 ms':>16} "
        f"{'echo p50':>8} {'x pb':>5} "
        f"{'rec/s x8':>8} {'py client':>9}"
    )
    print(header)
    go_cases = [go_case(name, rc, in_process) for name, rc in reconciles.items()]
    answers = answers_by_size(reconciles, in_process)
    with (
        own_core(SERVER_CORE),
        function_server() as server,
        echo_server(answers) as echo,
        own_core(CALLER_CORE),
        grpc.insecure_channel(server.target) as channel,
    ):
        call = raw_stub(channel)
        python_client = lambda r: call(r, timeout=30)  # noqa: E731
        go = over_grpc_from_go(server.target, echo, go_cases, reconciles_each)
        for name, reconcile in reconciles.items():
            calls, sent, last = run_reconcile(python_client, reconcile)
            local = timed(lambda rc=reconcile: run_reconcile(in_process, rc), reconciles_each)
            few = max(reconciles_each // 4, 10)
            new_tag, made, cold = (
                timed_after(FORGETS[kind], in_process, reconcile, few)
                for kind in ("new-tag", "made", "cold")
            )
            remote = timed(lambda rc=reconcile: run_reconcile(python_client, rc), reconciles_each)
            responses = [fnv1.RunFunctionResponse.FromString(in_process(r)) for r in sent]
            pure = statistics.median(
                timed(
                    lambda b=sent, rs=responses: (
                        [fnv1.RunFunctionRequest.FromString(x) for x in b],
                        [x.SerializeToString() for x in rs],
                    ),
                    50,
                )
            )
            measured = go[name]
            assert measured["calls"] == calls, (name, measured["calls"], calls)
            median = measured["median_ms"]
            results[f"{name} reconcile over gRPC, median (ms)"] = median
            resources = len(responses[-1].desired.resources)
            made_median = statistics.median(made)
            print(
                f"{name:20} {resources:>4} "
                f"{sum(len(b) for b in sent) / 1024:>8.1f} {len(last) / 1024:>8.1f} "
                f"{calls:>5} {statistics.median(local):>8.2f}/{p90(local):<9.2f}"
                f"{statistics.median(new_tag):>8.2f} {made_median:>8.2f} "
                f"{made_median * 1000 / resources:>6.1f} "
                f"{statistics.median(cold):>8.2f} "
                f"{median:>7.2f}/{measured['p90_ms']:<8.2f} {measured['echo_median_ms']:>8.2f} "
                f"{median / pure:>5.1f} "
                f"{measured['per_second']:>8.0f} {statistics.median(remote):>9.2f}"
            )
        results["server peak RSS (MiB)"] = peak_rss_mib(server.pid)
    results["cold start to first answer (s)"] = min(
        cold_start(reconciles["existing"]) for _ in range(3)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--profile",
        choices=["steady", "new-tag", "made"],
        help="profile the worst case: steady, its requests not known by tag, or its composition "
        "made again each time",
    )
    parser.add_argument("--reconciles", type=int, default=RECONCILES)
    parser.add_argument(
        "--only", choices=["cases", "fleet"], help="only the cases' table, or only the fleets'"
    )
    args = parser.parse_args()
    logging.configure(logging.Level.DISABLED)
    if args.profile:
        worst = worst_case()
        profile(Reconcile(steady_state(worst), worst.asked), FORGETS[args.profile])
        return 0
    results: dict[str, float] = {}
    tune_gc()  # as the server does
    if args.only != "fleet":
        each_case(results, args.reconciles)
    if args.only != "cases":
        fleets(results)
    print()
    failed = False
    for key, value in results.items():
        target = {**TARGETS, **FLEET_TARGETS}.get(key)
        if target is None:
            continue
        ok = value <= target
        failed |= not ok
        print(f"{key:48} {value:8.2f}  (target <= {target}: {'ok' if ok else 'MISSED'})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
