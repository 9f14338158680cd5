"""The gRPC server: the SDK's runtime.serve, with RunFunction's messages left as bytes.

The generated handler decodes every request into protobuf objects before the function sees it,
which costs more than composing; registered here without (de)serialisers, RunFunction hands the
bytes to FunctionRunner.answer, which reads only what it needs (wire.py). Everything else is the
SDK's: credentials, the v1beta1 service, reflection, the signal handling and the grace period.
"""

import asyncio
import ctypes
import gc
import signal
from collections.abc import Sequence
from typing import Any

import grpc
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from grpc_reflection.v1alpha import reflection

from function.fn import FunctionRunner

SERVICE = fnv1.DESCRIPTOR.services_by_name["FunctionRunnerService"].full_name
# A call allocates some 10^5 short-lived objects that reference counting frees: collecting the
# young generation every 700 allocations is wasted work.
YOUNG_GENERATION_THRESHOLD = 20_000
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


def serve(
    runner: FunctionRunner,
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
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    share_one_malloc_arena()
    server = grpc.aio.server(options=options)
    loop.add_signal_handler(
        signal.SIGTERM,
        lambda: asyncio.ensure_future(server.stop(grace=runtime.SHUTDOWN_GRACE_PERIOD_SECONDS)),
    )
    handler = grpc.unary_unary_rpc_method_handler(runner.run_function_bytes)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"RunFunction": handler}),)
    )
    grpcv1beta1.add_FunctionRunnerServiceServicer_to_server(
        runtime.BetaFunctionRunner(wrapped=runner), server
    )
    reflection.enable_server_reflection(runtime.SERVICE_NAMES, server)
    if creds is not None:
        server.add_secure_port(address, creds)
    if insecure:
        server.add_insecure_port(address)

    async def start() -> None:
        await server.start()
        tune_gc()
        await server.wait_for_termination()

    try:
        loop.run_until_complete(start())
    finally:
        loop.run_until_complete(server.stop(grace=runtime.SHUTDOWN_GRACE_PERIOD_SECONDS))
        loop.close()
