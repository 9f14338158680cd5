"""Run the real function server (python -m function --insecure) on a free loopback port."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(
    port: int, proc: subprocess.Popen, timeout: float = 30.0, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"function exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(interval)
    raise TimeoutError(f"function did not listen on 127.0.0.1:{port} within {timeout}s")


class Server(NamedTuple):
    target: str  # host:port, as crossplane render's development target wants it
    pid: int


@contextlib.contextmanager
def function_server(*extra_args: str, insecure: bool = True) -> Iterator[Server]:
    """Yield the gRPC target of a function started as `python -m function [--insecure]`.

    With FUNCTION_LOG_DIR set (the test session sets it), the server logs at debug level into a
    file there (structlog writes to stdout, tracebacks go to stderr: both), which the secrets scan
    reads at the end of the session.
    """
    port = free_port()
    log_dir = os.environ.get("FUNCTION_LOG_DIR")
    log = open(Path(log_dir) / f"function-{os.getpid()}-{port}.log", "wb") if log_dir else None  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "function",
            *(["--insecure"] if insecure else []),
            f"--address=127.0.0.1:{port}",
            *(["--debug"] if log else []),
            *extra_args,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=log or subprocess.DEVNULL,
        stderr=log or subprocess.PIPE,
    )
    try:
        wait_for_port(port, proc)
        yield Server(f"127.0.0.1:{port}", proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
        if log:
            log.close()
