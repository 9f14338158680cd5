"""A real Crossplane control plane on loopback, without containers, for the end-to-end tests.

It starts, in this order and each on a free 127.0.0.1 port, with a bounded wait for readiness:

1. etcd (built from go.etcd.io/etcd/server/v3 by `make e2e-tools`);
2. kube-apiserver v1.35 (token auth, a serving certificate from the PKI made here, RBAC);
3. Crossplane core's own CRDs, exactly the ones of the core version built (from that module's copy in
   the Go module cache), plus the extra CRDs asked for (provider and workload CRDs);
4. Crossplane core (`--package-runtime=External`, mTLS client certificates) with its webhook
   server on, serving the Usage webhook with a certificate of the PKI made here, and the
   ValidatingWebhookConfiguration `core init` would install pointed at it (`usage_webhook`);
5. the function, and a paused FunctionRevision labelled with the Composition's functionRef name
   whose status points at it (endpoint + capabilities). The function runs from the runtime image
   when one is given (an unpacked root, tests/tools/image.py: the image's entrypoint, as its user,
   in fresh namespaces on a read-only root, its TLS folder bind-mounted read-only at /tls/server
   and named by TLS_SERVER_CERTS_DIR as Crossplane's package runtime does), else from this
   checkout (`python -m function --tls-certs-dir ...`);
6. the XRDs (waiting for Crossplane to establish the CRDs it generates) and other manifests;
7. kube-controller-manager (garbage collector and namespace controllers) LAST, so the garbage
   collector discovers every kind at start instead of up to 30 s after it appears.

Everything started is stopped by PID, in reverse order (etcd last), when the `with` block ends,
when start-up fails half way, at interpreter exit, and on SIGTERM/SIGHUP. Logs are in
`<workdir>/logs/`. `python -m tests.e2e.controlplane` brings one up for a look around.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import concurrent.futures
import contextlib
import ctypes
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.e2e.kube import ApiError, Kube, condition, wait_for
from tests.tools import image as images

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tests" / "tools" / "controlplane"
SYSTEM_NAMESPACE = "modelplane-system"
CROSSPLANE_NAMESPACE = "crossplane-system"
CROSSPLANE_MODULE = "github.com/crossplane/crossplane/v2"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "crossplane-core")
LOCALHOST = "127.0.0.1"
IMAGE_TLS_DIR = "/tls/server"  # where the function's certificate folder is mounted in the image


class StartupError(RuntimeError):
    """A component did not come up; the message carries the tail of its log."""


# --- Binaries and the Crossplane CRDs that match them. -------------------------------------------


def bin_dir() -> Path:
    return Path(os.environ.get("CONTROLPLANE_BIN") or ROOT / ".tools" / "bin")


def binaries() -> dict[str, Path]:
    """The four binaries `make e2e-tools` builds; a missing one is an error naming the fix."""
    found = {name: bin_dir() / name for name in BINARIES}
    missing = [str(p) for p in found.values() if not os.access(p, os.X_OK)]
    if missing:
        raise FileNotFoundError(
            "control-plane binaries not built: " + ", ".join(missing) + "; run `make e2e-tools`"
        )
    return found


def required_version(go_mod: Path, module: str) -> str:
    """The version a pinned wrapper module's go.mod requires of module."""
    for line in go_mod.read_text().splitlines():
        words = line.split()
        if words[:2] == ["require", module]:
            return words[2]
    raise LookupError(f"no `require {module}` line in {go_mod}")


def module_dir(module: str, version: str, cwd: Path) -> Path:
    """Where Go's module cache holds module@version (downloaded if the cache lost it)."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise StartupError(f"go mod download {module}@{version}: {proc.stderr}")
    return Path(json.loads(proc.stdout)["Dir"])


def crossplane_version() -> str:
    """The Crossplane core version pinned in tests/tools/controlplane/crossplane/go.mod."""
    return required_version(TOOLS / "crossplane" / "go.mod", CROSSPLANE_MODULE)


def crossplane_crds() -> list[Path]:
    """Crossplane core's own CRDs, from the pinned module."""
    version = crossplane_version()
    folder = module_dir(CROSSPLANE_MODULE, version, TOOLS / "crossplane")
    crds = sorted((folder / "cluster" / "crds").glob("*.yaml"))
    if not crds:
        raise StartupError(f"no CRDs in {CROSSPLANE_MODULE}@{version}/cluster/crds")
    return crds


def function_name() -> str:
    """The functionRef name every Composition uses (the label core looks revisions up by)."""
    names = {
        step["functionRef"]["name"]
        for doc in load_yaml(sorted((ROOT / "compositions").glob("*.yaml")))
        for step in doc["spec"]["pipeline"]
    }
    if len(names) != 1:
        raise LookupError(f"compositions/ use {sorted(names)}, expected one function")
    return names.pop()


def function_capabilities() -> list[str]:
    """The capabilities the function package declares (package/crossplane.yaml)."""
    meta = yaml.safe_load((ROOT / "package" / "crossplane.yaml").read_text())
    return list(meta["spec"].get("capabilities") or ["composition"])


def load_yaml(paths: Iterable[Path]) -> list[dict]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def without_conversion_webhook(crd: dict) -> dict:
    """A provider CRD whose conversion webhook Crossplane's package manager would point at the
    provider's Service (left empty in the file): no provider runs here, so no conversion."""
    conversion = crd.get("spec", {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return crd
    return {**crd, "spec": {**crd["spec"], "conversion": {"strategy": "None"}}}


# --- PKI. -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Pki:
    """One CA (ECDSA P-256) and the certificates the control plane needs, as PEM files."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelplane-e2e-ca")])
        now = datetime.datetime.now(datetime.UTC)
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()),
                critical=False,
            )
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca_file = root / "ca.crt"
        self.ca_file.write_bytes(_pem_cert(self.ca_cert))

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        server: bool = False,
        client: bool = False,
        ips: Sequence[str] = (),
        dns: Sequence[str] = (),
    ) -> Path:
        """A folder `name` holding ca.crt, tls.crt and tls.key (the layout the SDK and core read)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [
            ExtendedKeyUsageOID.CLIENT_AUTH
        ] * client
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "ca.crt").write_bytes(_pem_cert(self.ca_cert))
        (folder / "tls.crt").write_bytes(_pem_cert(cert))
        (folder / "tls.key").write_bytes(_pem_key(key))
        (folder / "tls.key").chmod(0o600)
        return folder

    def key_pair(self, name: str) -> tuple[Path, Path]:
        """A signing key and its public key (the API server's service-account token keys)."""
        key = ec.generate_private_key(ec.SECP256R1())
        private, public = self.root / f"{name}.key", self.root / f"{name}.pub"
        private.write_bytes(_pem_key(key))
        private.chmod(0o600)
        public.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return private, public


def kubeconfig_text(
    server: str, pki: Pki, token: str | None, name: str = "e2e", *, inline: bool = True
) -> str:
    """A kubeconfig for server with a bearer token, if any, and its CA inline (a Secret's value)
    or as the CA file's path."""
    ca = (
        {"certificate-authority-data": base64.b64encode(pki.ca_file.read_bytes()).decode()}
        if inline
        else {"certificate-authority": str(pki.ca_file)}
    )
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": server, **ca}}],
            "users": [{"name": "admin", "user": {"token": token} if token else {}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
            "current-context": name,
        }
    )


def write_kubeconfig(path: Path, server: str, pki: Pki, token: str) -> None:
    """A kubeconfig file for the tools run here (the CA named by its path)."""
    path.write_text(kubeconfig_text(server, pki, token, inline=False))
    path.chmod(0o600)


# --- Processes. -----------------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGKILL if the test process dies without cleaning up (kill -9)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path
    # The program's own PID when popen is a wrapper that does not pass SIGTERM on (the unshare
    # around the function's image): that is the PID stopped.
    main_pid: int | None = None

    @property
    def pid(self) -> int:
        return self.main_pid or self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM this PID, then SIGKILL after grace seconds (the wrapper too, if any)."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                self.popen.wait(timeout=10)


@dataclass
class Endpoints:
    etcd: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    crossplane_metrics: int = field(default_factory=free_port)
    crossplane_health: int = field(default_factory=free_port)
    crossplane_webhook: int = field(default_factory=free_port)
    function: int = field(default_factory=free_port)


class Supervisor:
    """Processes started in order and stopped by PID in reverse order: when the `with` block ends,
    when start-up fails half way, at interpreter exit, and on SIGTERM/SIGHUP. Logs are in
    `<workdir>/logs/`."""

    def __init__(self, workdir: Path):
        self.workdir = workdir.resolve()
        self.processes: list[Process] = []
        self.kube: Kube | None = None
        self.timings: dict[str, float] = {}
        self._stopping = False
        self._lock = threading.RLock()  # stop() may run again from a signal handler
        self._previous_handlers: dict[int, object] = {}

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self):
        raise NotImplementedError

    def guard(self) -> None:
        """Stop everything at interpreter exit and on SIGTERM/SIGHUP (start() does this)."""
        atexit.register(self.stop)
        self._trap_signals()

    def stop(self) -> None:
        """Stop every process started, by PID, newest first (etcd last). Safe to call again: a
        process already stopped is skipped."""
        with self._lock:
            self._stopping = True
            if self.kube is not None:
                self.kube.close()
            for proc in reversed(self.processes):
                with contextlib.suppress(Exception):
                    proc.stop()
            self._restore_signals()
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)

    def _trap_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, _frame):
            if self._stopping:  # already stopping: let it finish
                return
            # Stop everything now, then unwind like Ctrl-C (pytest tears down and exits).
            self.stop()
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._previous_handlers[sig] = signal.signal(sig, handler)

    def _restore_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous_handlers.items():
            with contextlib.suppress(Exception):
                signal.signal(sig, previous)
        self._previous_handlers.clear()

    def run_steps(self, steps: Callable[[], Iterable[tuple[str, Callable[[], None]]]]) -> None:
        """Run each (name, step) steps() yields, in order and timed (`timings`), guarded: on any
        failure, stop what started and re-raise."""
        self.guard()
        began = time.monotonic()
        try:
            (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
            for name, step in steps():
                self._step(name, step)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - began

    def _step(self, name: str, run) -> None:
        began = time.monotonic()
        run()
        self.timings[name] = time.monotonic() - began

    def api_pki(
        self, server: str, *, ips: list[str], dns: list[str], users: list[tuple[str, str]]
    ) -> Pki:
        """The API server's PKI in `<workdir>/pki`: its serving certificate (`apiserver_certs`),
        the service-account key pair, a static token file of users (token, name), each in
        system:masters, and at `kubeconfig` the first user's kubeconfig for server."""
        pki = self.pki = Pki(self.workdir / "pki")
        self.apiserver_certs = pki.issue(
            "apiserver", "kube-apiserver", server=True, ips=ips, dns=dns
        )
        self.sa_key, self.sa_pub = pki.key_pair("service-account")
        self.tokens = self.workdir / "tokens.csv"
        self.tokens.write_text(
            "".join(
                f'{token},{name},{uid},"system:masters"\n'
                for uid, (token, name) in enumerate(users, 1)
            )
        )
        self.tokens.chmod(0o600)
        write_kubeconfig(self.kubeconfig, server, pki, users[0][0])
        return pki

    def spawn(self, name: str, argv: list[str], env: dict | None = None) -> Process:
        log = self.workdir / "logs" / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                argv,
                cwd=self.workdir,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C reaches us, and we stop them in order
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
            )
        proc = Process(name, popen, log)
        self.processes.append(proc)
        return proc

    def wait_ready(self, proc: Process, check, timeout: float, what: str) -> None:
        def probe():
            if not proc.alive():
                raise StartupError(
                    f"{proc.name} exited with {proc.popen.returncode} before {what}:\n{proc.tail()}"
                )
            with contextlib.suppress(Exception):
                return check()
            return False

        try:
            wait_for(probe, timeout=timeout, what=f"{proc.name}: {what}", interval=0.2)
        except TimeoutError as e:
            raise StartupError(f"{e}\n--- {proc.log} ---\n{proc.tail()}") from None

    # --- Kubernetes components, shared by the management and the workload cluster --------------

    def run_apiserver(self, binary: Path, *, etcd: str, port: int, extra: Sequence[str]) -> None:
        """kube-apiserver on loopback with token auth (self.tokens), RBAC and this PKI's serving
        certificate (self.apiserver_certs, self.sa_key/sa_pub); self.kube is its admin client."""
        proc = self.spawn(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers={etcd}",
                f"--bind-address={LOCALHOST}",
                f"--advertise-address={LOCALHOST}",
                f"--secure-port={port}",
                f"--tls-cert-file={self.apiserver_certs / 'tls.crt'}",
                f"--tls-private-key-file={self.apiserver_certs / 'tls.key'}",
                f"--token-auth-file={self.tokens}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.sa_pub}",
                f"--service-account-signing-key-file={self.sa_key}",
                # No kubernetes Service endpoints to keep (a loopback address is not allowed there).
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *extra,
            ],
        )
        self.kube = Kube(LOCALHOST, port, self.token, str(self.pki.ca_file))
        kube = self.kube
        self.wait_ready(proc, lambda: kube.request("GET", "/readyz") == "ok", 90, "/readyz")

    def run_kube_component(
        self, binary: Path, port: int, certs: Path, extra: Sequence[str]
    ) -> None:
        """kube-controller-manager or kube-scheduler against self.kubeconfig, serving /healthz
        on loopback with a certificate of this PKI."""
        proc = self.spawn(
            binary.name,
            [
                str(binary),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                f"--bind-address={LOCALHOST}",
                f"--secure-port={port}",
                f"--tls-cert-file={certs / 'tls.crt'}",
                f"--tls-private-key-file={certs / 'tls.key'}",
                "--profiling=false",
                *extra,
            ],
        )
        context = ssl.create_default_context(cafile=str(self.pki.ca_file))

        def healthy() -> bool:
            url = f"https://{LOCALHOST}:{port}/healthz"
            with urllib.request.urlopen(url, timeout=2, context=context) as r:  # noqa: S310
                return r.read() == b"ok"

        self.wait_ready(proc, healthy, 60, "/healthz")

    def process(self, name: str) -> Process:
        for p in self.processes:
            if p.name == name:
                return p
        raise LookupError(name)

    def logs(self, lines: int = 40) -> str:
        """The tail of every component's log, for a failing test's message."""
        return "\n".join(f"--- {p.name} (pid {p.pid}) ---\n{p.tail(lines)}" for p in self.processes)


class ControlPlane(Supervisor):
    """etcd + kube-apiserver + Crossplane core + the function + kube-controller-manager.

    Use as a context manager; `kube` is a client with cluster-admin rights, `kubeconfig` a file
    for other tools. With `image` (an unpacked runtime image; root only), the function runs from it.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        crds: Sequence[Path] = (),
        xrds: Sequence[Path] = (),
        manifests: Sequence[Path] = (),
        namespaces: Sequence[str] = (SYSTEM_NAMESPACE,),
        timeout: float = 120.0,
        image: images.Rootfs | None = None,
    ):
        super().__init__(workdir)
        self.image = image
        self.crds, self.xrds, self.manifests = list(crds), list(xrds), list(manifests)
        self.namespaces = list(namespaces)
        self.timeout = timeout
        self.ports = Endpoints()
        self.token = secrets.token_hex(16)
        self.kubeconfig = self.workdir / "kubeconfig"

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        def steps():
            bins = binaries()
            self._pki()
            yield "etcd", lambda: self._etcd(bins["etcd"])
            yield "kube-apiserver", lambda: self._apiserver(bins["kube-apiserver"])
            yield "crds", self._install_crds
            yield "crossplane", lambda: self._crossplane(bins["crossplane-core"])
            yield "function", self._function
            yield "xrds", self._install_xrds
            yield (
                "kube-controller-manager",
                lambda: self._controller_manager(bins["kube-controller-manager"]),
            )

        self.run_steps(steps)
        return self

    # --- components ------------------------------------------------------------------------------

    def _pki(self) -> None:
        pki = self.api_pki(
            f"https://{LOCALHOST}:{self.ports.apiserver}",
            ips=[LOCALHOST],
            dns=["localhost"],
            users=[(self.token, "admin")],
        )
        self.controller_manager_certs = pki.issue(
            "controller-manager", "kube-controller-manager", server=True, ips=[LOCALHOST]
        )
        # The function's server certificate must name the endpoint host core dials.
        self.function_certs = pki.issue(
            "function", "function-inference-cluster", server=True, ips=[LOCALHOST]
        )
        self.crossplane_client_certs = pki.issue("crossplane-client", "crossplane", client=True)
        # Core's webhook server, which the API server dials at the loopback address.
        self.crossplane_server_certs = pki.issue(
            "crossplane-server", "crossplane-webhook", server=True, ips=[LOCALHOST]
        )

    def _etcd(self, binary: Path) -> None:
        client = f"http://{LOCALHOST}:{self.ports.etcd}"
        peer = f"http://{LOCALHOST}:{self.ports.etcd_peer}"
        proc = self.spawn(
            "etcd",
            [
                str(binary),
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                "--unsafe-no-fsync",  # a throwaway store: no fsync keeps the disk out of the timings
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client}/health", timeout=2) as r:  # noqa: S310
                return json.load(r).get("health") == "true"

        self.wait_ready(proc, healthy, 30, "/health")

    def _apiserver(self, binary: Path) -> None:
        self.run_apiserver(
            binary,
            etcd=f"http://{LOCALHOST}:{self.ports.etcd}",
            port=self.ports.apiserver,
            extra=[
                # No token controller runs, so pods' service-account tokens cannot be handled.
                "--disable-admission-plugins=ServiceAccount",
                "--service-cluster-ip-range=10.0.0.0/24",
            ],
        )

    def _install_crds(self) -> None:
        crds = load_yaml(crossplane_crds()) + [
            without_conversion_webhook(c) for c in load_yaml(self.crds)
        ]
        self.apply_all(crds)
        self.wait_established([c["metadata"]["name"] for c in crds], self.timeout)
        for ns in [CROSSPLANE_NAMESPACE, *self.namespaces]:
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def _crossplane(self, binary: Path) -> None:
        health = self.ports.crossplane_health
        proc = self.spawn(
            "crossplane",
            [
                str(binary),
                "--debug",
                "core",
                "start",
                # With webhooks on (the default), core starts the Usage controllers and serves
                # the Usage webhook from tls.crt/tls.key in the server folder (crossplane v2.2.1
                # cmd/crossplane/core/core.go: `webhook.NewServer` with `CertDir:
                # c.TLSServerCertsDir`, `Port: c.WebhookPort`; the protection setup and
                # `usagehook.SetupWebhookWithManager` only `if c.EnableWebhooks`). It listens on
                # every interface (no flag sets the host), at a free port.
                "--enable-webhooks=true",
                f"--webhook-port={self.ports.crossplane_webhook}",
                f"--tls-server-certs-dir={self.crossplane_server_certs}",
                "--package-runtime=External",
                f"--namespace={CROSSPLANE_NAMESPACE}",
                f"--xpkg-cache-dir={self.workdir / 'xpkg-cache'}",
                f"--tls-client-certs-dir={self.crossplane_client_certs}",
                f"--metrics-port={self.ports.crossplane_metrics}",
                f"--health-probe-port={health}",
                # The simulated providers answer at once, where real ones take minutes: a cloud
                # XR's dozens of resources each get a status and an external-name write within a
                # second, over the default burst of 100 watch events that opens an XR's circuit
                # breaker (and then lets one event through every few seconds).
                "--circuit-breaker-burst=1000",
            ],
            # Crossplane parses its flags with kong: controller-runtime finds the API server here.
            env={"KUBECONFIG": str(self.kubeconfig)},
        )

        def ready() -> bool:
            url = f"http://{LOCALHOST}:{health}/readyz"
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
                return r.status == 200

        # /readyz includes the webhook server's StartedChecker when webhooks are on.
        self.wait_ready(proc, ready, 60, "/readyz")
        self.apply(usage_webhook(self.ports.crossplane_webhook, self.pki.ca_file.read_bytes()))

    def _image_certs(self) -> Path:
        """A copy of the function's certificate folder owned by the image's user (the key is 0600)."""
        assert self.image is not None
        uid, gid = self.image.ids
        folder = self.pki.root / "function-image"
        shutil.copytree(self.function_certs, folder)
        for path in (folder, *folder.iterdir()):
            os.chown(path, uid, gid)
        folder.chmod(0o500)
        return folder

    def _function(self) -> None:
        endpoint = f"{LOCALHOST}:{self.ports.function}"
        if self.image is None:
            proc = self.spawn(
                "function",
                [
                    sys.executable,
                    "-m",
                    "function",
                    "--debug",
                    f"--tls-certs-dir={self.function_certs}",
                    f"--address={endpoint}",
                ],
                env={"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)},
            )
        else:
            proc = self.spawn(
                "function",
                images.command(
                    self.image,
                    ["--debug", f"--address={endpoint}"],
                    binds=[(self._image_certs(), IMAGE_TLS_DIR)],
                    env=[f"TLS_SERVER_CERTS_DIR={IMAGE_TLS_DIR}"],
                ),
            )

        def listening() -> bool:
            with socket.create_connection((LOCALHOST, self.ports.function), 0.5):
                return True

        self.wait_ready(proc, listening, 60, f"listening on {endpoint}")
        if self.image is not None:
            try:
                proc.main_pid = images.entrypoint_pid(proc.popen.pid)
            except LookupError as e:
                raise StartupError(f"function: {e}\n{proc.tail()}") from None

        # Core finds a function by its active revision's label and dials status.endpoint with
        # mTLS. The revision is paused, so no package manager pulls its (unreachable) image.
        name = function_name()
        revision = {
            "apiVersion": "pkg.crossplane.io/v1",
            "kind": "FunctionRevision",
            "metadata": {
                "name": f"{name}-local",
                "labels": {"pkg.crossplane.io/package": name},
                "annotations": {"crossplane.io/paused": "true"},
            },
            "spec": {
                "image": f"example.invalid/{name}:v0.0.0-local",
                "desiredState": "Active",
                "revision": 1,
            },
        }
        self.apply(revision)
        assert self.kube is not None
        status = {"endpoint": endpoint, "capabilities": function_capabilities()}
        self.kube.patch(
            "pkg.crossplane.io/v1",
            "FunctionRevision",
            f"{name}-local",
            {"status": status},
            subresource="status",
        )
        got = self.kube.get("pkg.crossplane.io/v1", "FunctionRevision", f"{name}-local")
        if got.get("status", {}).get("endpoint") != endpoint:
            raise StartupError(f"FunctionRevision status not patched: {got.get('status')}")

    def _install_xrds(self) -> None:
        xrds = load_yaml(self.xrds)
        self.apply_all(xrds)
        assert self.kube is not None
        kube = self.kube

        def established() -> bool:
            return all(
                condition(
                    kube.get(x["apiVersion"], x["kind"], x["metadata"]["name"]), "Established"
                ).get("status")
                == "True"
                for x in xrds
            )

        crossplane = self.process("crossplane")
        self.wait_ready(crossplane, established, self.timeout, "XRDs Established")
        # The CRD Crossplane generates for an XRD is named like the XRD.
        self.wait_established([x["metadata"]["name"] for x in xrds], self.timeout)
        self.apply_all(load_yaml(self.manifests))

    def _controller_manager(self, binary: Path) -> None:
        self.run_kube_component(
            binary,
            self.ports.controller_manager,
            self.controller_manager_certs,
            ["--controllers=garbagecollector,namespace", "--use-service-account-credentials=false"],
        )

    # --- helpers for installers and tests --------------------------------------------------------

    def apply(self, obj: dict) -> dict:
        assert self.kube is not None
        return self.kube.apply(obj)

    def apply_all(self, objs: Sequence[dict], workers: int = 4) -> None:
        """Server-side apply many objects, a few at a time (each is independent)."""
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for future in [pool.submit(self.apply, o) for o in objs]:
                future.result()

    def wait_established(self, names: Sequence[str], timeout: float) -> None:
        assert self.kube is not None
        kube = self.kube
        pending = set(names)

        def check() -> bool:
            for crd in kube.list("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
                if condition(crd, "Established").get("status") == "True":
                    pending.discard(crd["metadata"]["name"])
            return not pending

        wait_for(
            check,
            timeout=timeout,
            what=f"{len(names)} CRDs Established",
            interval=0.5,
            describe=lambda: f"not yet: {sorted(pending)[:10]}",
            ignore=(ApiError,),
        )


# The one webhook configuration Crossplane v2.2.1 ships (cluster/webhookconfigurations/usage.yaml),
# which `crossplane core init` applies with the caBundle and core's Service filled in
# (internal/initializer/webhook_configurations.go). Core serves it at this path
# (internal/webhook/protection/usage/handler.go); the Usage controller labels what a Usage names
# (internal/controller/protection/usage/reconciler.go), so only those deletions reach it.
USAGE_WEBHOOK = "crossplane-no-usages"
USAGE_WEBHOOK_PATH = "/validate-no-usages"
IN_USE_LABEL = "crossplane.io/in-use"


def usage_webhook(port: int, ca_bundle: bytes) -> dict:
    """Crossplane's ValidatingWebhookConfiguration for Usages, as upstream but reached by URL:
    core runs on this host, not behind a Service."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": USAGE_WEBHOOK},
        "webhooks": [
            {
                "name": "nousages.protection.crossplane.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": f"https://{LOCALHOST}:{port}{USAGE_WEBHOOK_PATH}",
                    "caBundle": base64.b64encode(ca_bundle).decode(),
                },
                "failurePolicy": "Fail",
                "objectSelector": {"matchLabels": {IN_USE_LABEL: "true"}},
                "rules": [
                    {
                        "apiGroups": ["*"],
                        "apiVersions": ["*"],
                        "operations": ["DELETE"],
                        "resources": ["*"],
                    }
                ],
                "sideEffects": "None",
            }
        ],
    }


# --- Interactive use. -----------------------------------------------------------------------------


def project_control_plane(workdir: Path, image: images.Rootfs | None = None) -> ControlPlane:
    """The control plane the e2e tests use: this project's XRDs, Compositions and the CRDs, and
    the function from the unpacked runtime image if one is given."""
    crds_dir = Path(os.environ.get("CRDS_DIR") or ROOT.parent / "shared" / "crds").resolve()
    return ControlPlane(
        workdir,
        crds=provider_crds(crds_dir),
        xrds=sorted((ROOT / "apis").glob("*/definition.yaml")),
        manifests=sorted((ROOT / "compositions").glob("*.yaml")),
        image=image,
    )


def provider_crds(crds_dir: Path) -> list[Path]:
    """Every provider and workload CRD under crds_dir, except the colliding alternatives and the
    Crossplane core CRDs (those come from the core module, at the version that runs)."""
    if not (crds_dir / "SOURCES.md").is_file():
        raise FileNotFoundError(f"provider CRDs not found at {crds_dir}; set CRDS_DIR")
    skip = {"_alternatives", "crossplane"}
    return sorted(
        p for p in crds_dir.rglob("*.yaml") if not skip & set(p.relative_to(crds_dir).parts)
    )


def main() -> None:  # pragma: no cover - a developer's tool
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder")
    parser.add_argument(
        "--image",
        type=Path,
        help="run the function from this runtime image tarball (`make image`; root only)",
    )
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="controlplane-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rootfs = images.rootfs(args.image, workdir / "rootfs") if args.image else None
    with project_control_plane(workdir, rootfs) as cp:
        print(f"up in {cp.timings['total']:.1f}s: {json.dumps(cp.timings)}")
        print(f"export KUBECONFIG={cp.kubeconfig}   # logs in {workdir / 'logs'}; Ctrl-C stops")
        with contextlib.suppress(KeyboardInterrupt):
            while all(p.alive() for p in cp.processes):
                time.sleep(1)
        dead = [p.name for p in cp.processes if not p.alive()]
        if dead:
            print(f"exited: {dead}\n{cp.logs()}")


if __name__ == "__main__":
    main()
