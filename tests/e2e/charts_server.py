"""A loopback chart server: the charts of ../shared/charts, served in the shape each Release names.

Every Release the function composes names a chart by repository, name and version
(function/versions.py: CHARTS for the serving stack, CLOUD_CHARTS for what a cloud installs). This
server answers for the real hostnames of those repositories, on port 443 of one loopback address:

- an `https://` repository is a Helm chart repository: `<path>/index.yaml` (written by the real
  `helm repo index --url <repository>`) and `<path>/<name>-<version>.tgz`, the archive the real
  `helm package` makes of the chart's folder (SOURCES.md: the archive each project publishes is
  `helm package` of that tree);
- an `oci://` repository is an OCI registry (the distribution API subset Helm's pull uses through
  oras-go v2.6.1, in Helm v3.21.1 as provider-helm v1.3.0 links it and in v4.2.3 alike: `GET /v2/`,
  `GET|HEAD /v2/<repo>/manifests/<tag|digest>`, `GET|HEAD /v2/<repo>/blobs/<digest>`,
  `GET /v2/<repo>/tags/list`), holding for each chart the
  manifest `helm push` writes (pkg/registry/client.go Push, in both: an OCI image manifest,
  config `application/vnd.cncf.helm.config.v1+json` = the chart's metadata as JSON, one layer
  `application/vnd.cncf.helm.chart.content.v1.tar+gzip` = the archive, the chart's OCI
  annotations) tagged with the chart version. `docker.io` is also served as `registry-1.docker.io`,
  the host oras-go dials for it (registry/reference.go `Host()`).

A chart the function names that has no public source (csi-mounted-fs-path, ../shared/charts/
SOURCES.md) is served from a stand-in written here (tests/e2e/stand-in-charts: only the objects the
function relies on); any other chart ../shared/charts lacks is not served: a pull of it gets 404,
as from a repository without it. A test can withdraw
a served OCI chart version for a while, as a registry that no longer has it: it lists
`<host>/<repo>:<tag>` lines in `<workdir>/withdrawn`, read on every request (the tag is then
left out of the tag list and its manifest is unknown). The certificate is
issued by a CA made here for every served hostname; clients trust that CA and resolve the
hostnames to the server's address (tests/e2e/providers.py does both for the providers). Every
request is appended to `<workdir>/requests.jsonl` (host, method, path, status).

Run it as `python -m tests.e2e.charts_server --workdir DIR [--address 127.x.y.z]`: it prints one
JSON line (address, port, ca, hostnames) once it listens, and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.server
import json
import os
import random
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import yaml

from function.versions import CHARTS, CLOUD_CHARTS
from function.versions import Chart as Named
from tests.e2e.controlplane import Pki

ROOT = Path(__file__).resolve().parents[2]
PORT = 443  # the repositories' URLs name no port
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"  # helm pkg/registry/constants.go
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
# Charts with no public source, served from a stand-in of ours under the same name and version.
STAND_INS = frozenset({"csi-mounted-fs-path"})
STAND_IN_CHARTS = ROOT / "tests" / "e2e" / "stand-in-charts"
# Charts a released version of the function installed that live clusters still run, served so the
# upgrade from each is proven (tests/e2e/test_workload.py): the DRA driver's NGC line, v0.2.0's
# CHARTS["nvidia-dra-driver"].
FORMER = (
    Named(
        name="nvidia-dra-driver-gpu",
        repository="https://helm.ngc.nvidia.com/nvidia",
        version="25.12.0",
        namespace="nvidia-dra-driver",
    ),
)
# oras-go v2.6.1 registry/reference.go: Reference.Host() dials registry-1.docker.io for docker.io.
HOST_ALIASES = {"docker.io": ("registry-1.docker.io",)}


@dataclass(frozen=True, order=True)
class Chart:
    """One chart as a Release names it, and its folder in ../shared/charts (None: not there)."""

    repository: str
    name: str
    version: str
    folder: Path | None

    @property
    def oci(self) -> bool:
        return self.repository.startswith("oci://")

    @property
    def host(self) -> str:
        return urlparse(self.repository).hostname or ""

    @property
    def path(self) -> str:
        """The repository's path on its host, without slashes at either end."""
        return urlparse(self.repository).path.strip("/")


def charts_dir() -> Path:
    path = Path(os.environ.get("CHARTS_DIR") or ROOT.parent / "shared" / "charts").resolve()
    if not (path / "SOURCES.md").is_file():
        raise FileNotFoundError(f"charts not found at {path}; set CHARTS_DIR to ../shared/charts")
    return path


def helm_bin() -> str:
    path = os.environ.get("HELM") or str(ROOT / ".tools" / "bin" / "helm")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"helm not found at {path}; run `make setup`")
    return path


def wanted(folder: Path | None = None) -> list[Chart]:
    """Every chart the function names (function/versions.py) or named in a release (FORMER), with
    its folder `<name>-<version>` if that holds exactly that chart at exactly that version."""
    folder = folder or charts_dir()
    found = []
    for spec in {*CHARTS.values(), *CLOUD_CHARTS.values(), *FORMER}:
        home = STAND_IN_CHARTS if spec.name in STAND_INS else folder
        path = home / f"{spec.name}-{spec.version}"
        meta = path / "Chart.yaml"
        ok = meta.is_file() and (
            (m := yaml.safe_load(meta.read_text()))["name"],
            m["version"],
        ) == (spec.name, spec.version)
        found.append(Chart(spec.repository, spec.name, spec.version, path if ok else None))
    return sorted(found)


def hostnames(charts: Iterable[Chart]) -> list[str]:
    """Every hostname a client dials for these charts (aliases included)."""
    hosts = {c.host for c in charts}
    return sorted(hosts | {a for h in hosts for a in HOST_ALIASES.get(h, ())})


def pick_address() -> str:
    """A loopback address of its own (127.0.0.0/8 is all loopback on Linux), so runs side by side
    each get port 443."""
    rng = random.SystemRandom()
    return f"127.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_annotations(meta: dict) -> dict[str, str]:
    """What helm push writes as the manifest's annotations (helm pkg/registry/chart.go
    generateOCIAnnotations): description, title, version, url, created, source, authors, then
    the chart's own annotations except title and version."""
    out = {
        "org.opencontainers.image.description": meta.get("description", ""),
        "org.opencontainers.image.title": meta["name"],
        "org.opencontainers.image.version": meta["version"],
        "org.opencontainers.image.url": meta.get("home", ""),
        "org.opencontainers.image.created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "org.opencontainers.image.source": (meta.get("sources") or [""])[0],
    }
    authors = ", ".join(
        m.get("name", "") + (f" ({m['email']})" if m.get("email") else "")
        for m in meta.get("maintainers") or []
    )
    out["org.opencontainers.image.authors"] = authors
    out = {k: v for k, v in out.items() if v.strip()}
    for key, value in (meta.get("annotations") or {}).items():
        if key not in ("org.opencontainers.image.title", "org.opencontainers.image.version"):
            out[key] = value
    return out


class Content:
    """What the server holds: files by (host, path) and OCI repositories by (host, repo)."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], tuple[bytes, str]] = {}
        self.manifests: dict[tuple[str, str], dict[str, bytes]] = {}  # tag or digest -> manifest
        self.blobs: dict[tuple[str, str], dict[str, bytes]] = {}
        self.tags: dict[tuple[str, str], list[str]] = {}

    def add_oci(self, chart: Chart, archive: bytes, meta: dict) -> None:
        repo = f"{chart.path}/{chart.name}".strip("/")
        config = json.dumps(meta, separators=(",", ":")).encode()
        layer = {"mediaType": HELM_CHART_LAYER, "digest": _digest(archive), "size": len(archive)}
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "config": {
                    "mediaType": HELM_CONFIG,
                    "digest": _digest(config),
                    "size": len(config),
                },
                "layers": [layer],
                "annotations": oci_annotations(meta),
            },
            separators=(",", ":"),
        ).encode()
        # OCI tags cannot hold "+": helm push writes "_" for it (helm pkg/registry/client.go).
        tag = chart.version.replace("+", "_")
        for host in (chart.host, *HOST_ALIASES.get(chart.host, ())):
            key = (host, repo)
            self.blobs.setdefault(key, {}).update(
                {_digest(config): config, _digest(archive): archive}
            )
            self.manifests.setdefault(key, {}).update({tag: manifest, _digest(manifest): manifest})
            self.tags.setdefault(key, []).append(tag)

    def add_file(self, host: str, path: str, data: bytes, content_type: str) -> None:
        self.files[(host, "/" + path.strip("/"))] = (data, content_type)


def build(workdir: Path, charts: Iterable[Chart]) -> Content:
    """Package every chart with the real Helm and lay out the repositories."""
    helm = helm_bin()
    content = Content()
    by_repo: dict[str, list[tuple[Chart, Path]]] = {}
    for chart in charts:
        if chart.folder is None:
            continue
        out = workdir / "packages" / chart.host / chart.path
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [helm, "package", str(chart.folder), "--destination", str(out)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        archive = out / f"{chart.name}-{chart.version}.tgz"
        if chart.oci:
            meta = yaml.safe_load((chart.folder / "Chart.yaml").read_text())
            content.add_oci(chart, archive.read_bytes(), meta)
        else:
            by_repo.setdefault(chart.repository, []).append((chart, archive))
    for repository, items in by_repo.items():
        out = items[0][1].parent
        subprocess.run(
            [helm, "repo", "index", str(out), "--url", repository.rstrip("/")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        chart = items[0][0]
        index = (out / "index.yaml").read_bytes()
        content.add_file(chart.host, f"{chart.path}/index.yaml", index, "application/x-yaml")
        for c, archive in items:
            content.add_file(
                c.host, f"{c.path}/{archive.name}", archive.read_bytes(), "application/gzip"
            )
    return content


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "modelplane-e2e-charts"
    protocol_version = "HTTP/1.1"
    timeout = 60  # a connection idle that long is closed
    content: Content
    log_file: Path
    withdrawn_file: Path
    lock = threading.Lock()

    def withdrawn(self, host: str, repo: str) -> set[str]:
        """The tags of host/repo a test withdrew (see the module's docstring)."""
        try:
            lines = self.withdrawn_file.read_text().split()
        except FileNotFoundError:
            return set()
        prefix = f"{host}/{repo}:"
        return {line.removeprefix(prefix) for line in lines if line.startswith(prefix)}

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def log_message(self, format: str, *args) -> None:
        pass

    def _answer(self, body: bool) -> None:
        host = (self.headers.get("Host") or "").split(":")[0].lower()
        path = urlparse(self.path).path
        status, data, headers = self._route(host, path)
        with self.lock, self.log_file.open("a") as log:
            log.write(
                json.dumps({"host": host, "method": self.command, "path": path, "status": status})
                + "\n"
            )
        self.send_response(status)
        for name, value in {"Content-Length": str(len(data)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _route(self, host: str, path: str) -> tuple[int, bytes, dict[str, str]]:
        if (host, path) in self.content.files:
            data, kind = self.content.files[(host, path)]
            return 200, data, {"Content-Type": kind}
        if path in {"/v2/", "/v2"}:
            return 200, b"{}", {"Content-Type": "application/json", **_REGISTRY}
        if path.startswith("/v2/"):
            return self._registry(host, path.removeprefix("/v2/"))
        return 404, b"not found\n", {"Content-Type": "text/plain"}

    def _registry(self, host: str, rest: str) -> tuple[int, bytes, dict[str, str]]:
        for kind in ("manifests", "blobs", "tags"):
            repo, sep, ref = rest.rpartition(f"/{kind}/")
            if sep:
                break
        else:
            return _oci_error(404, "NAME_UNKNOWN", rest)
        key = (host, repo)
        gone = self.withdrawn(host, repo)
        if kind == "manifests" and ref in gone:
            return _oci_error(404, "MANIFEST_UNKNOWN", f"{repo} {ref}")
        if kind == "tags" and ref == "list" and key in self.content.tags:
            tags = sorted(set(self.content.tags[key]) - gone)
            data = json.dumps({"name": repo, "tags": tags}).encode()
            return 200, data, {"Content-Type": "application/json", **_REGISTRY}
        if kind == "manifests" and ref in self.content.manifests.get(key, {}):
            data = self.content.manifests[key][ref]
            return (
                200,
                data,
                {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": _digest(data), **_REGISTRY},
            )
        if kind == "blobs" and ref in self.content.blobs.get(key, {}):
            data = self.content.blobs[key][ref]
            return (
                200,
                data,
                {
                    "Content-Type": "application/octet-stream",
                    "Docker-Content-Digest": ref,
                    **_REGISTRY,
                },
            )
        code = {"manifests": "MANIFEST_UNKNOWN", "blobs": "BLOB_UNKNOWN"}.get(kind, "NAME_UNKNOWN")
        return _oci_error(404, code, f"{repo} {ref}")


_REGISTRY = {"Docker-Distribution-API-Version": "registry/2.0"}


def _oci_error(status: int, code: str, detail: str) -> tuple[int, bytes, dict[str, str]]:
    data = json.dumps(
        {"errors": [{"code": code, "message": code.lower(), "detail": detail}]}
    ).encode()
    return status, data, {"Content-Type": "application/json", **_REGISTRY}


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(workdir: Path, address: str | None = None) -> tuple[Server, dict]:
    """Package the charts, make the CA and certificate, and listen (not yet serving)."""
    workdir.mkdir(parents=True, exist_ok=True)
    charts = wanted()
    names = hostnames(charts)
    content = build(workdir, charts)
    pki = Pki(workdir / "pki")
    for _ in range(20):
        ip = address or pick_address()
        try:
            server = Server((ip, PORT), Handler)
            break
        except OSError:
            if address:
                raise
    else:
        raise OSError("no free loopback address for port 443")
    certs = pki.issue("server", "modelplane-e2e-charts", server=True, dns=names, ips=[ip])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    # The handshake happens in each connection's thread (on its first read), not in accept().
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    log_file = workdir / "requests.jsonl"
    log_file.touch()
    server.RequestHandlerClass = type(
        "BoundHandler",
        (Handler,),
        {"content": content, "log_file": log_file, "withdrawn_file": workdir / "withdrawn"},
    )
    info = {
        "address": ip,
        "port": PORT,
        "ca": str(pki.ca_file),
        "hostnames": names,
        "requests": str(log_file),
        "charts": [
            {
                "repository": c.repository,
                "name": c.name,
                "version": c.version,
                "served": c.folder is not None,
            }
            for c in charts
        ],
    }
    return server, info


def main() -> None:  # pragma: no cover - run as a process by tests/e2e/providers.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--address", help="a loopback address (default: one picked at random)")
    args = parser.parse_args()
    server, info = serve(args.workdir, args.address)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    (args.workdir / "server.json").write_text(json.dumps(info, indent=2))
    print(json.dumps(info), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever(poll_interval=0.2)
    server.server_close()


if __name__ == "__main__":
    main()
