"""The gRPC server: the SDK's runtime.serve, synchronous, with RunFunction's messages left as bytes.

The generated handler decodes every request into protobuf objects before the function sees it,
which costs more than composing; registered here without (de)serialisers, RunFunction hands the
bytes to FunctionRunner.answer, which reads only what it needs (wire.py). The v1beta1 service's
messages are the v1 messages under another package (the SDK converts between them by
serialising one and parsing the other), so it is served by the same bytes handler.

grpc's synchronous server, not grpc.aio as in the SDK: a call reaches its worker thread straight
from gRPC's completion queue, without the asyncio loop's wake-ups in between. Side by side over
gRPC, from the same Go caller: about 15 % less latency per reconcile and 3 MiB less peak RSS.
One worker, since Python runs one call at a time whatever the pool; the calls waiting for it
queue in the server. Everything else is the SDK's: credentials, the service names for
reflection, the grace period on SIGTERM.
"""

import ctypes
import gc
import signal
import threading
from collections.abc import Sequence
from concurrent import futures
from typing import Any, Protocol

import grpc
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from grpc_reflection.v1alpha import reflection

SERVICES = tuple(
    file.services_by_name["FunctionRunnerService"].full_name
    for file in (fnv1.DESCRIPTOR, fnv1beta1.DESCRIPTOR)
)
# A call allocates some 10^5 short-lived objects that reference counting frees: collecting the
# young generation every 700 allocations is wasted work.
YOUNG_GENERATION_THRESHOLD = 20_000
# HTTP/2 flow control (gRPC core's channel args, grpc_types.h): a call waiting for the worker
# holds at most 256 KiB of its request in this process (the stream's window, lookahead_bytes);
# the rest stays with the caller until the worker reads it. With BDP probing (on by default)
# gRPC widens every window to what the link carries, so each of Crossplane's concurrent calls
# (up to 1.7 MiB for the largest cluster) would be received whole while it waits. A/B with
# eight concurrent Go callers (`make bench`, the cases' table): peak RSS 74.7 MiB instead of
# 81.3, one caller's latency the same, eight callers' throughput of the largest request a fifth
# lower (264 reconciles a second instead of 328, some 25 times what 256 clusters ask).
FLOW_CONTROL = (("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 256 * 1024))
# mallopt's parameter number for the most arenas glibc malloc may make (malloc.h).
M_ARENA_MAX = -8


def share_one_malloc_arena() -> None:
    """Have every thread allocate from glibc's main arena.

    glibc gives each thread that allocates its own arena (up to eight per core), and each arena
    keeps what was freed in it: gRPC's threads receive and send messages of up to half a MiB, so
    under concurrent callers several arenas each hold a peak's worth. Python runs one call at a
    time, so one arena costs no waiting (A/B over gRPC: the same latency, 2-4 MiB less peak RSS).
    Set before the server starts its threads.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, macOS): its allocator is left as it is
        return
    libc.mallopt(M_ARENA_MAX, 1)


def tune_gc() -> None:
    """Leave what is loaded at start (modules, schemas, validators) out of every collection, and
    collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, older, oldest)


class Runner(Protocol):
    """What the server calls: serialised RunFunctionRequest in, serialised response out."""

    def run_function_bytes(self, data: bytes, context: grpc.ServicerContext) -> bytes: ...


def serve(
    runner: Runner,
    address: str,
    *,
    creds: grpc.ServerCredentials | None,
    insecure: bool,
    options: Sequence[tuple[str, Any]] | None = None,
) -> None:
    if creds is None and not insecure:
        raise ValueError(
            "no credentials were provided - did you provide credentials or use the insecure flag?"
        )
    share_one_malloc_arena()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-function"),
        options=(*(options or ()), *FLOW_CONTROL),
    )
    handler = grpc.unary_unary_rpc_method_handler(runner.run_function_bytes)
    server.add_generic_rpc_handlers(
        tuple(
            grpc.method_handlers_generic_handler(service, {"RunFunction": handler})
            for service in SERVICES
        )
    )
    reflection.enable_server_reflection(runtime.SERVICE_NAMES, server)
    if creds is not None:
        server.add_secure_port(address, creds)
    if insecure:
        server.add_insecure_port(address)
    server.start()

    def stop(*_: object) -> threading.Event:
        """Refuse new calls; those in flight have the SDK's grace period to finish."""
        return server.stop(runtime.SHUTDOWN_GRACE_PERIOD_SECONDS)

    signal.signal(signal.SIGTERM, stop)
    tune_gc()
    try:
        server.wait_for_termination()
    finally:
        stop().wait()
