"""The control-plane runner's own promises, without the control plane: it stops by PID what it
started (on stop, on failure, on SIGTERM, and when its process is killed outright), and its PKI
gives each party the certificate it needs. Fast: `sleep` stands in for the components."""

import base64
import ipaddress
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.e2e.controlplane import (
    CROSSPLANE_MODULE,
    ROOT,
    TOOLS,
    USAGE_WEBHOOK_PATH,
    ControlPlane,
    Pki,
    Process,
    StartupError,
    crossplane_version,
    function_capabilities,
    function_name,
    load_yaml,
    module_dir,
    provider_crds,
    usage_webhook,
    without_conversion_webhook,
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by a dead parent's init) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout=20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)


def test_stop_ends_every_process_newest_first(tmp_path, monkeypatch):
    order = []
    original = Process.stop

    def recording(self, grace=10.0):
        order.append(self.name)
        original(self, grace=0.5 if self.name == "stubborn" else grace)

    monkeypatch.setattr(Process, "stop", recording)
    cp = ControlPlane(tmp_path)
    (tmp_path / "logs").mkdir()
    procs = [cp.spawn(f"p{i}", ["sleep", "60"]) for i in range(3)]
    # One ignores SIGTERM: stop() still ends it (SIGKILL after the grace period).
    stubborn = cp.spawn("stubborn", [sys.executable, "-c", IGNORE_TERM])
    deadline = time.monotonic() + 20
    while "ready" not in stubborn.tail():
        assert time.monotonic() < deadline, "the stubborn process did not start"
        time.sleep(0.05)
    cp.stop()
    assert order == ["stubborn", "p2", "p1", "p0"]
    assert wait_gone([p.pid for p in [*procs, stubborn]]) == []
    cp.stop()  # again: nothing left to do, no error


# A wrapper that ignores SIGTERM while its program runs, as util-linux unshare does around the image's
# entrypoint; it says the program's PID.
WRAPPER = (
    "import signal, subprocess, sys; p = subprocess.Popen(['sleep', '60']); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(p.pid, flush=True); sys.exit(p.wait())"
)


def test_stop_signals_the_program_inside_a_wrapper(tmp_path):
    cp = ControlPlane(tmp_path)
    (tmp_path / "logs").mkdir()
    wrapped = cp.spawn("function", [sys.executable, "-c", WRAPPER])
    deadline = time.monotonic() + 20
    while not wrapped.tail().strip().isdigit():
        assert time.monotonic() < deadline, "the wrapper did not start its program"
        time.sleep(0.05)
    wrapped.main_pid = int(wrapped.tail())
    assert wrapped.pid == wrapped.main_pid != wrapped.popen.pid
    began = time.monotonic()
    cp.stop()
    assert time.monotonic() - began < 5, "stopped by SIGKILL after the grace period, not SIGTERM"
    assert wait_gone([wrapped.main_pid, wrapped.popen.pid]) == []


def test_a_failed_start_stops_what_was_started(tmp_path, monkeypatch):
    cp = ControlPlane(tmp_path)
    started = []

    def fake_etcd(binary):
        started.append(cp.spawn("etcd", ["sleep", "60"]))

    def broken_apiserver(binary):
        proc = cp.spawn("kube-apiserver", ["sh", "-c", "echo cannot listen; exit 3"])
        cp.wait_ready(proc, lambda: False, 10, "/readyz")

    monkeypatch.setattr(
        "tests.e2e.controlplane.binaries",
        lambda: dict.fromkeys(
            ["etcd", "kube-apiserver", "kube-controller-manager", "crossplane-core"], Path("x")
        ),
    )
    monkeypatch.setattr(cp, "_etcd", fake_etcd)
    monkeypatch.setattr(cp, "_apiserver", broken_apiserver)
    with pytest.raises(StartupError, match=r"(?s)kube-apiserver exited with 3.*cannot listen"):
        cp.start()
    assert wait_gone([p.pid for p in started]) == []


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tests.e2e.controlplane import ControlPlane
    cp = ControlPlane(Path(sys.argv[1]))
    (cp.workdir / "logs").mkdir()
    cp.guard()
    pids = [cp.spawn(f"p{i}", ["sleep", "60"]).pid for i in range(2)]
    print(" ".join(map(str, pids)), flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_nothing_outlives_the_runner(tmp_path, sig):
    """SIGTERM: the handler stops everything by PID. SIGKILL (no handler can run): the children
    die with their parent (PR_SET_PDEATHSIG)."""
    runner = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids = [int(p) for p in runner.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        runner.send_signal(sig)
        runner.wait(timeout=30)
        assert wait_gone(pids) == [], f"left running after {sig.name}: {pids}"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        runner.stdout.close()


def test_pki_gives_each_party_its_certificate(tmp_path):
    pki = Pki(tmp_path)
    server = pki.issue("function", "fn", server=True, ips=["127.0.0.1"])
    client = pki.issue("client", "crossplane", client=True)
    ca = x509.load_pem_x509_certificate(pki.ca_file.read_bytes())
    for folder, usage in (
        (server, ExtendedKeyUsageOID.SERVER_AUTH),
        (client, ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        assert sorted(p.name for p in folder.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
        cert = x509.load_pem_x509_certificate((folder / "tls.crt").read_bytes())
        cert.verify_directly_issued_by(ca)
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [usage]
        assert (folder / "tls.key").stat().st_mode & 0o077 == 0
    cert = x509.load_pem_x509_certificate((server / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # Core dials the endpoint 127.0.0.1:PORT and checks the server certificate names that host.
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_project_facts_the_runner_reads():
    """The label core finds the function by, its capabilities, the core version, the CRDs."""
    assert function_name() == "modelplane-function-inference-cluster"
    assert "composition" in function_capabilities()
    crank = (ROOT / "tests" / "tools" / "crank" / "go.mod").read_text()
    assert f"github.com/crossplane/crossplane/v2 {crossplane_version()}" in crank, (
        "Crossplane core and the CLI are one version"
    )


def test_the_usage_webhook_is_the_one_core_ships():
    """The webhook configuration the control plane applies is every one the pinned core ships
    (`core init` applies them), but for how the API server reaches it: a URL on this host and the
    run's CA, where upstream names core's Service."""
    version = crossplane_version()
    folder = module_dir(CROSSPLANE_MODULE, version, TOOLS / "crossplane")
    shipped = load_yaml(sorted((folder / "cluster" / "webhookconfigurations").glob("*.yaml")))
    built = usage_webhook(9443, b"the CA")

    def reached(conf: dict) -> list[dict]:
        return [w["clientConfig"] for w in conf["webhooks"]]

    def without_client(conf: dict) -> dict:
        hooks = [{k: v for k, v in w.items() if k != "clientConfig"} for w in conf["webhooks"]]
        return {**conf, "webhooks": hooks}

    assert [without_client(c) for c in shipped] == [without_client(built)], version
    assert [c["service"]["path"] for c in reached(shipped[0])] == [USAGE_WEBHOOK_PATH]
    assert reached(built) == [
        {
            "url": f"https://127.0.0.1:9443{USAGE_WEBHOOK_PATH}",
            "caBundle": base64.b64encode(b"the CA").decode(),
        }
    ]


def test_provider_crds_leave_out_the_alternatives_and_core(tmp_path):
    (tmp_path / "SOURCES.md").write_text("")
    for rel in (
        "provider-helm/a.yaml",
        "workload/gateway-api/b.yaml",
        "_alternatives/provider-vultr/c.yaml",
        "crossplane/d.yaml",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    got = [p.relative_to(tmp_path).as_posix() for p in provider_crds(tmp_path)]
    assert got == ["provider-helm/a.yaml", "workload/gateway-api/b.yaml"]


def test_a_conversion_webhook_without_a_provider_becomes_none():
    crd = {"spec": {"group": "g", "conversion": {"strategy": "Webhook", "webhook": {}}}}
    assert without_conversion_webhook(crd)["spec"]["conversion"] == {"strategy": "None"}
    assert crd["spec"]["conversion"]["strategy"] == "Webhook", "the input is not changed"
    plain = {"spec": {"group": "g"}}
    assert without_conversion_webhook(plain) is plain
