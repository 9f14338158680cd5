"""The real providers against the e2e control plane: provider-helm v1.3.0 and provider-kubernetes
v1.3.1 as processes, and the loopback chart server they pull the charts from.

`Providers(control_plane)` starts, in this order, each with a bounded wait:

1. the chart server (tests/e2e/charts_server.py, a process of its own): every chart the function
   names, on port 443 of a loopback address of its own, with a CA made for it;
2. the Nebius IAM stand-in (tests/tools/nebiusiam, built by `make e2e-tools`): the gRPC token
   exchange github.com/nebius/gosdk v0.2.29 (linked by both providers, pkg/kube/client/nebius)
   dials to trade a service account's signed JWT for an IAM token, on port 443 of a loopback
   address of its own with a certificate of the control plane's CA (trusted by the providers next
   to the chart server's). It knows one service account, whose key this makes
   (`nebius_credentials`: the credentials.json a Nebius ProviderConfig's Secret holds), and
   answers with the token the test writes to `nebius_token_file`;
3. provider-helm, then provider-kubernetes (built by `make e2e-tools` from the pinned wrapper
   modules in tests/tools/providers), each in a mount namespace of its own (`unshare --mount`, so
   it runs as root outside a container) where
   - `/etc/hosts` is a file made here that maps every repository hostname (charts_server.hostnames)
     to the chart server's address (provider-helm dials the real names the Releases carry), and
     Nebius IAM's token exchange host (NEBIUS_IAM_HOST) to the Nebius IAM stand-in's;
   - `/tmp` is a folder of its own under the workdir: provider-helm keeps its chart cache in
     the fixed paths /tmp/charts and /tmp/content-cache (pkg/clients/helm/client.go), which must
     not be shared with another run; its kubeconfig, CA bundle and TLS folder are there too;
   - SSL_CERT_FILE and SSL_CERT_DIR name only the chart server's CA (Go's crypto/x509 reads both on
     Linux), HOME is that /tmp (no Helm or Docker credentials of the host), proxies are unset;
   - the network is the host's: the management API server and any workload API server on
     127.0.0.1 stay reachable as they are.

The providers run as Crossplane's package manager would run them, with the flags their main.go
reads at those tags (cmd/provider/main.go): leader election off (`--no-leader-election`,
their default), `--enable-management-policies` (default true, stated: the function composes
Observe-only Objects), `--poll` and `--sync` short for tests (`--enable-watches`, alpha and off by
default, only with `watches=True`: without it provider-kubernetes ignores an Object's
`spec.watch`, as an installed package does), debug logs; provider-kubernetes with metrics off and
health probes on a free 127.0.0.1 port (readiness: `/readyz`); provider-helm v1.3.0, which has
neither flag, with controller-runtime's metrics on :8080 (readiness: `/metrics` answers). They read the API server from KUBECONFIG
(controller-runtime's GetConfig) with the control plane's admin token. provider-kubernetes serves
its conversion webhook (registered unconditionally) from TLS_SERVER_CERTS_DIR on a free port;
the e2e CRDs have no conversion webhook, so nothing calls it.

Processes are spawned through the control plane (`ControlPlane.spawn`): logs in
`<workdir>/logs/<name>.log`, stopped by PID newest first when the `with` block ends, when start-up
fails, and, with the control plane's own processes, at exit and on SIGTERM/SIGHUP.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.e2e.charts_server import pick_address
from tests.e2e.controlplane import (
    ROOT,
    ControlPlane,
    Process,
    bin_dir,
    free_port,
)

PROVIDERS = ("provider-helm", "provider-kubernetes")
# provider-helm v1.3.0 serves controller-runtime's metrics here and has no flag to move them.
HELM_METRICS_PORT = 8080
CHARTS_SERVER = "charts-server"
NEBIUS_IAM = "nebius-iam"
# gosdk v0.2.29: "tokens.iam" (services/nebius/iam/v1/token_exchange_service.sdk.go) + ".{domain}"
# (conn/resolvers.go), domain api.nebius.cloud (config/paths/paths.go) on port 443 (sdk.go ensurePort).
NEBIUS_IAM_HOST = "tokens.iam.api.nebius.cloud"
NEBIUS_ACCOUNT = "serviceaccount-e00e2e0000000000000"
NEBIUS_KEY_ID = "publickey-e00e2e0000000000000"
# Mounts the namespace's own /etc/hosts and /tmp, then becomes the command.
# The program is opened before /tmp is covered and run from that descriptor, so it runs wherever
# it lives, a checkout under /tmp included.
# The binary keeps its own name as argv[0] (`exec -a`, bash), as in its image: what a process
# calls itself shows, e.g. as the field manager Helm names after it inside provider-helm.
NAMESPACE_SCRIPT = (
    'exec 9<"$3" && mount --bind "$1" /etc/hosts && mount --bind "$2" /tmp'
    ' && name=$(basename "$3") && shift 3 && exec -a "$name" /proc/self/fd/9 "$@"'
)
# The provider's /tmp inside its namespace: a private folder of the workdir, bind-mounted there.
INSIDE_TMP = "/tmp"  # noqa: S108
NO_PROXY_ENV = {
    k: ""
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
}


def provider_binaries() -> dict[str, Path]:
    """The two providers and the Nebius IAM stand-in `make e2e-tools` builds; a missing one is
    an error naming the fix."""
    found = {name: bin_dir() / name for name in (*PROVIDERS, NEBIUS_IAM)}
    missing = [str(p) for p in found.values() if not os.access(p, os.X_OK)]
    if missing:
        raise FileNotFoundError(
            "providers not built: " + ", ".join(missing) + "; run `make e2e-tools`"
        )
    return found


def self_contained_kubeconfig(path: Path) -> str:
    """A kubeconfig with every CA file it names inlined (certificate-authority-data): a provider
    sees only its own /tmp, so a kubeconfig it reads, from KUBECONFIG or from a ProviderConfig's
    Secret, must not point at files (as a cloud's kubeconfig does not)."""
    config = yaml.safe_load(path.read_text())
    for cluster in config.get("clusters") or []:
        ca_path = cluster["cluster"].pop("certificate-authority", None)
        if ca_path:
            data = base64.b64encode(Path(ca_path).read_bytes()).decode()
            cluster["cluster"]["certificate-authority-data"] = data
    return yaml.safe_dump(config)


def in_namespace(argv: list[str], hosts: Path, tmp: Path) -> list[str]:
    """argv run in a mount namespace of its own with `hosts` as /etc/hosts and `tmp` as /tmp
    (as the same PID: unshare without --fork execs its command, and so does bash)."""
    unshare = shutil.which("unshare") or "unshare"
    prefix = [unshare, "--mount", "--propagation", "private", "--", "/bin/bash", "-c"]
    return [*prefix, NAMESPACE_SCRIPT, "bash", str(hosts), str(tmp), *argv]


def private_tmp(folder: Path, ca: Path, *more_cas: Path) -> Path:
    """A process's /tmp for in_namespace, trusting only the CA `ca` and `more_cas` (see
    namespace_env)."""
    (folder / "certs").mkdir(parents=True)
    shutil.copyfile(ca, folder / "ca.crt")
    shutil.copyfile(ca, folder / "certs" / "charts-ca.pem")
    for i, extra in enumerate(more_cas):
        shutil.copyfile(extra, folder / "certs" / f"ca-{i}.pem")
    folder.chmod(0o1777)
    return folder


def namespace_env() -> dict[str, str]:
    """The environment of a process in_namespace: only the CA of its /tmp trusted (Go's
    crypto/x509 reads SSL_CERT_FILE and SSL_CERT_DIR), HOME that /tmp (no Helm or Docker
    credentials of the host), no proxy."""
    return {
        **NO_PROXY_ENV,
        "HOME": INSIDE_TMP,
        "SSL_CERT_FILE": f"{INSIDE_TMP}/ca.crt",
        "SSL_CERT_DIR": f"{INSIDE_TMP}/certs",
    }


def hosts_file(
    address: str, hostnames: list[str], base: str = "", more: dict[str, str] | None = None
) -> str:
    """An /etc/hosts: localhost, then every repository hostname at the chart server's address
    and every hostname of `more` at its address (lines of `base` naming those are dropped)."""
    entries = {**dict.fromkeys(hostnames, address), **(more or {})}
    names = set(entries)
    kept = [
        line for line in base.splitlines() if not names & set(line.split("#", 1)[0].split()[1:])
    ]
    ours = [f"{ip}\t{name}" for name, ip in entries.items()]
    return "\n".join(["127.0.0.1\tlocalhost", "::1\tlocalhost", *kept, *ours]) + "\n"


class Providers:
    """The chart server and both providers against `control_plane` (which must be started).

    Use as a context manager. After start(): `charts` is the chart server's description (address,
    ca, hostnames, charts served), `hosts` the /etc/hosts the providers see, `requests()` what the
    chart server was asked, `process(name)` one of the processes.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        *,
        poll: str = "10s",
        sync: str = "1m",
        watches: bool = False,
        timeout: float = 60.0,
    ):
        self.cp = control_plane
        self.workdir = control_plane.workdir / "providers"
        self.poll, self.sync, self.watches, self.timeout = poll, sync, watches, timeout
        self.processes: list[Process] = []
        self.charts: dict = {}
        self.hosts: Path = self.workdir / "hosts"
        self.timings: dict[str, float] = {}
        self.nebius_credentials = ""
        self.nebius_token_file: Path = self.workdir / NEBIUS_IAM / "token"
        self.nebius_address = ""

    def __enter__(self) -> Providers:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Providers:
        began = time.monotonic()
        try:
            bins = provider_binaries()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir.mkdir(parents=True)
            self._step(CHARTS_SERVER, self._charts_server)
            self._step(NEBIUS_IAM, lambda: self._nebius_iam(bins[NEBIUS_IAM]))
            self._step("hosts", self._hosts)
            for name in PROVIDERS:
                self._step(name, lambda n=name: self._provider(n, bins[n]))
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop what this started, by PID, newest first (the chart server last)."""
        for proc in reversed(self.processes):
            with contextlib.suppress(Exception):
                proc.stop()

    def process(self, name: str) -> Process:
        for p in self.processes:
            if p.name == name:
                return p
        raise LookupError(name)

    def requests(self) -> list[dict]:
        """Every request the chart server answered: host, method, path, status."""
        path = Path(self.charts["requests"])
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    @contextlib.contextmanager
    def withdrawn(self, repository: str, name: str, version: str) -> Iterator[None]:
        """An OCI chart version the chart server no longer has, and provider-helm's cached copy
        of it gone (its cache, /tmp/charts, is read before any pull), for the with block."""
        host, _, path = repository.removeprefix("oci://").partition("/")
        listing = self.workdir / "charts" / "withdrawn"
        listing.write_text(f"{host}/{path}/{name}:{version}\n")
        cached = self.workdir / "provider-helm" / "tmp" / "charts" / f"{name}-{version}.tgz"
        cached.unlink(missing_ok=True)
        try:
            yield
        finally:
            listing.unlink(missing_ok=True)

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"--- {p.name} (pid {p.pid}) ---\n{p.tail(lines)}" for p in self.processes)

    # --- components ------------------------------------------------------------------------------

    def _step(self, name: str, run) -> None:
        began = time.monotonic()
        run()
        self.timings[name] = time.monotonic() - began

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Process:
        proc = self.cp.spawn(name, argv, env)
        self.processes.append(proc)
        return proc

    def _charts_server(self) -> None:
        folder = self.workdir / "charts"
        info = folder / "server.json"
        proc = self._spawn(
            CHARTS_SERVER,
            [sys.executable, "-m", "tests.e2e.charts_server", f"--workdir={folder}"],
            {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)},
        )

        def listening() -> bool:
            self.charts = json.loads(info.read_text())
            context = ssl.create_default_context(cafile=self.charts["ca"])
            name = self.charts["hostnames"][0]
            address = (self.charts["address"], self.charts["port"])
            with (
                socket.create_connection(address, 1) as raw,
                context.wrap_socket(raw, server_hostname=name),
            ):
                return True

        # Packaging the charts with the real Helm takes most of this.
        self.cp.wait_ready(proc, listening, 120, "listening with its certificate")

    def _nebius_iam(self, binary: Path) -> None:
        """The Nebius IAM stand-in, with a service account key made here."""
        folder = self.workdir / NEBIUS_IAM
        folder.mkdir(parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = folder / "public.pem"
        public.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        # The credentials.json of a Nebius service account's authorized key, as provider-kubernetes
        # v1.3.1 reads it (pkg/kube/client/nebius credentialsFile).
        self.nebius_credentials = json.dumps(
            {
                "alg": "RS256",
                "private_key": private,
                "public_key_id": NEBIUS_KEY_ID,
                "account_id": NEBIUS_ACCOUNT,
            }
        )
        self.nebius_token_file.touch(mode=0o600)
        for _ in range(20):
            self.nebius_address = pick_address()
            if self.nebius_address != self.charts["address"]:
                break
        certs = self.cp.pki.issue(NEBIUS_IAM, NEBIUS_IAM_HOST, server=True, dns=[NEBIUS_IAM_HOST])
        proc = self._spawn(
            NEBIUS_IAM,
            [
                str(binary),
                f"--listen={self.nebius_address}:443",
                f"--tls-cert={certs / 'tls.crt'}",
                f"--tls-key={certs / 'tls.key'}",
                f"--public-key={public}",
                f"--public-key-id={NEBIUS_KEY_ID}",
                f"--account-id={NEBIUS_ACCOUNT}",
                f"--token-file={self.nebius_token_file}",
            ],
            {},
        )

        def listening() -> bool:
            context = ssl.create_default_context(cafile=str(self.cp.pki.ca_file))
            context.set_alpn_protocols(["h2"])
            with (
                socket.create_connection((self.nebius_address, 443), 1) as raw,
                context.wrap_socket(raw, server_hostname=NEBIUS_IAM_HOST),
            ):
                return True

        self.cp.wait_ready(proc, listening, 30, "listening with its certificate")

    def _hosts(self) -> None:
        base = Path("/etc/hosts").read_text() if Path("/etc/hosts").is_file() else ""
        more = {NEBIUS_IAM_HOST: self.nebius_address}
        self.hosts.write_text(
            hosts_file(self.charts["address"], self.charts["hostnames"], base, more)
        )

    def _private_tmp(self, name: str) -> Path:
        """The provider's /tmp: a self-contained kubeconfig, the chart server's CA, TLS folder."""
        tmp = private_tmp(self.workdir / name / "tmp", Path(self.charts["ca"]), self.cp.pki.ca_file)
        (tmp / "kubeconfig").write_text(self_contained_kubeconfig(self.cp.kubeconfig))
        (tmp / "kubeconfig").chmod(0o600)
        if name == "provider-kubernetes":
            certs = self.cp.pki.issue(f"{name}-webhook", name, server=True, ips=["127.0.0.1"])
            shutil.copytree(certs, tmp / "tls")
        return tmp

    def _provider(self, name: str, binary: Path) -> None:
        tmp = self._private_tmp(name)
        health = free_port()
        args = [
            str(binary),
            "--debug",
            "--no-leader-election",
            "--enable-management-policies",
            f"--poll={self.poll}",
            f"--sync={self.sync}",
            "--max-reconcile-rate=10",
        ]
        if name == "provider-helm":
            # v1.3.0 has no health probes, metrics or webhook flags: controller-runtime serves its
            # metrics on its default :8080 (metrics/server DefaultBindAddress), which answers once
            # the manager runs.
            url = f"http://127.0.0.1:{HELM_METRICS_PORT}/metrics"
        else:
            args += [
                "--metrics-bind-address=0",
                f"--health-probe-bind-addr=127.0.0.1:{health}",
                f"--webhook-port={free_port()}",
            ]
            url = f"http://127.0.0.1:{health}/readyz"
        env = {
            **namespace_env(),
            "KUBECONFIG": f"{INSIDE_TMP}/kubeconfig",
            "TLS_SERVER_CERTS_DIR": f"{INSIDE_TMP}/tls",
        }
        if name == "provider-kubernetes" and self.watches:
            args.append("--enable-watches")
        proc = self._spawn(name, in_namespace(args, self.hosts, tmp), env)

        def ready() -> bool:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
                return r.status == 200

        self.cp.wait_ready(proc, ready, self.timeout, url)
