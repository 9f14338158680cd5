"""A small Kubernetes API client over plain HTTPS (the standard library only).

Enough for the control-plane tests: discovery of a kind's resource path, get/list, server-side
apply, create/update with dry run, JSON merge patches (also on the status subresource) and delete.
Errors come back as ApiError with the server's Status (code, reason, message, causes), so a test
can assert on the exact admission message. kubectl is not needed.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

FIELD_MANAGER = "modelplane-e2e"


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status object."""

    def __init__(self, status: int, body: dict | str, method: str, path: str):
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.reason = self.body.get("reason", "")
        self.message = self.body.get("message", str(body))
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def causes(self) -> list[dict]:
        return self.body.get("details", {}).get("causes", [])


@dataclass(frozen=True)
class Resource:
    """Where a kind lives: its REST path pieces and whether it is namespaced."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class Kube:
    """One API server, reached with a bearer token over TLS verified against its CA."""

    def __init__(self, host: str, port: int, token: str, ca_file: str, timeout: float = 30):
        self.host, self.port, self.token, self.timeout = host, port, token, timeout
        self.context = ssl.create_default_context(cafile=ca_file)
        self.local = threading.local()  # one keep-alive connection per thread, its last warnings
        self.discovery: dict[str, dict[str, Resource]] = {}
        self.discovery_lock = threading.Lock()

    # --- transport -------------------------------------------------------------------------------

    def connection(self) -> http.client.HTTPSConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self.host, self.port, context=self.context, timeout=self.timeout
            )
            self.local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            conn.close()
            self.local.conn = None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """The decoded JSON answer (text for non-JSON answers); ApiError for non-2xx."""
        url = path + ("?" + urllib.parse.urlencode(params) if params else "")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self.connection()
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, ConnectionError, ssl.SSLError, OSError):
                # A keep-alive connection the server closed: reconnect once.
                self.close()
                if attempt == 2:
                    raise
        # The API server's Warning headers (299 "unknown field ..." on fieldValidation=Warn).
        self.local.warnings = [warning_text(v) for v in resp.headers.get_all("Warning") or []]
        text = raw.decode() if raw else ""
        try:
            decoded = json.loads(text) if text else {}
        except json.JSONDecodeError:
            decoded = text
        if resp.status >= 300:
            raise ApiError(resp.status, decoded, method, url)
        return decoded

    def warnings(self) -> list[str]:
        """The Warning headers of this thread's last answer."""
        return list(getattr(self.local, "warnings", []))

    # --- discovery -------------------------------------------------------------------------------

    def resources(self, api_version: str, refresh: bool = False) -> dict[str, Resource]:
        """The kinds served at api_version (refetched on demand: CRDs appear while tests run)."""
        with self.discovery_lock:
            if refresh or api_version not in self.discovery:
                path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
                try:
                    listing = self.request("GET", path)
                except ApiError as e:
                    if e.status != 404:
                        raise
                    listing = {"resources": []}
                self.discovery[api_version] = {
                    r["kind"]: Resource(api_version, r["kind"], r["name"], r["namespaced"])
                    for r in listing.get("resources", [])
                    if "/" not in r["name"]
                }
            return self.discovery[api_version]

    def resource(self, api_version: str, kind: str) -> Resource:
        found = self.resources(api_version).get(kind) or self.resources(api_version, True).get(kind)
        if found is None:
            raise LookupError(f"{api_version} {kind} is not served by the API server")
        return found

    def resource_of(self, obj: dict) -> Resource:
        return self.resource(obj["apiVersion"], obj["kind"])

    # --- verbs -----------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        return self.request("GET", self.resource(api_version, kind).path(namespace, name))

    def get_or_none(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict]:
        params = {"labelSelector": label_selector} if label_selector else None
        path = self.resource(api_version, kind).path(namespace)
        return self.request("GET", path, params=params).get("items", [])

    def apply(self, obj: dict, *, dry_run: bool = False, manager: str = FIELD_MANAGER) -> dict:
        """Server-side apply (force: the tests own what they apply)."""
        res = self.resource_of(obj)
        meta = obj["metadata"]
        params = {"fieldManager": manager, "force": "true", "fieldValidation": "Strict"}
        if dry_run:
            params["dryRun"] = "All"
        return self.request(
            "PATCH",
            res.path(meta.get("namespace"), meta["name"]),
            obj,
            params=params,
            content_type="application/apply-patch+yaml",
        )

    def create(self, obj: dict, *, dry_run: bool = False, strict: bool = True) -> dict:
        """POST; strict (as kubectl) rejects unknown fields instead of pruning them."""
        res = self.resource_of(obj)
        return self.request(
            "POST",
            res.path(obj["metadata"].get("namespace")),
            obj,
            params=write_params(dry_run, strict),
        )

    def update(self, obj: dict, *, dry_run: bool = False, strict: bool = True) -> dict:
        """PUT: obj must carry the resourceVersion it was read at."""
        res = self.resource_of(obj)
        meta = obj["metadata"]
        return self.request(
            "PUT",
            res.path(meta.get("namespace"), meta["name"]),
            obj,
            params=write_params(dry_run, strict),
        )

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: dict,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        manager: str = FIELD_MANAGER,
        field_validation: str | None = None,
    ) -> dict:
        """A JSON merge patch (on the status subresource if asked)."""
        path = self.resource(api_version, kind).path(namespace, name)
        if subresource:
            path += f"/{subresource}"
        params = {"fieldManager": manager}
        if field_validation:
            params["fieldValidation"] = field_validation
        return self.request(
            "PATCH", path, patch, params=params, content_type="application/merge-patch+json"
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete in the background (the garbage collector takes dependents); False if absent."""
        try:
            self.request(
                "DELETE",
                self.resource(api_version, kind).path(namespace, name),
                {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True


class Watch:
    """A watch of one kind from a resourceVersion, on a connection of its own, in a thread of its
    own: each event's (type, object) goes to on_event until stop()."""

    def __init__(
        self,
        kube: Kube,
        api_version: str,
        kind: str,
        resource_version: str,
        on_event: Callable[[str, dict], None],
    ) -> None:
        self.kube, self.on_event = kube, on_event
        params = {"watch": "true", "resourceVersion": resource_version}
        self.url = kube.resource(api_version, kind).path() + "?" + urllib.parse.urlencode(params)
        self.conn = http.client.HTTPSConnection(kube.host, kube.port, context=kube.context)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    def start(self) -> Watch:
        headers = {"Authorization": f"Bearer {self.kube.token}", "Accept": "application/json"}
        self.conn.request("GET", self.url, headers=headers)
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            raise ApiError(self.resp.status, self.resp.read().decode(), "WATCH", self.url)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            if self.conn.sock is not None:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)
        self.conn.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                line = self.resp.readline()
            except (OSError, http.client.HTTPException, ValueError) as e:
                if not self._stop.is_set():
                    self.errors.append(repr(e))
                return
            if not line:
                if not self._stop.is_set():
                    self.errors.append("the API server ended the watch")
                return
            event = json.loads(line)
            self.on_event(event["type"], event["object"])


class Ticker:
    """tick() every interval seconds on a thread of its own, until stop(); closing() runs on that
    thread when it ends and on the stopping one (each closes the connections it opened)."""

    def __init__(
        self, name: str, tick: Callable[[], object], interval: float, closing: Callable[[], None]
    ) -> None:
        self.name, self.tick, self.interval, self.closing = name, tick, interval, closing
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.closing()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.tick()
                self._stop.wait(self.interval)
        finally:
            self.closing()


def write_params(dry_run: bool, strict: bool) -> dict[str, str]:
    params = {"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict" if strict else "Warn"}
    if dry_run:
        params["dryRun"] = "All"
    return params


def warning_text(header: str) -> str:
    """The text of a `Warning: 299 - "text"` header (RFC 7234), unescaped."""
    text = header.split(" ", 2)[-1].strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def condition(obj: dict | None, type_: str) -> dict:
    """The condition of that type in obj's status ({} when absent)."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return {}


def wait_for(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.25,
    describe: Callable[[], str] | None = None,
    ignore: Iterable[type[BaseException]] = (),
) -> T:
    """Poll check() until it returns something truthy; fail after timeout naming what and why."""
    deadline = time.monotonic() + timeout
    ignored = tuple(ignore)
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except ignored as e:
            last = e
        if time.monotonic() >= deadline:
            detail = describe() if describe else f"last result: {last!r}"
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; {detail}")
        time.sleep(interval)
