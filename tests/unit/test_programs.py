"""The API client the programs on a workload cluster share (function/serving/programs/kube_api.py):
how it reaches the API server. Their calls against a real one are in tests/e2e (test_crd_job,
and the workload e2e's GPU health reporter)."""

import datetime
import ssl
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from function.serving import programs
from function.serving.programs import kube_api


def _ca(path):
    """A CA certificate without an Authority Key Identifier, as old EKS clusters' are."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _api(tmp_path, **env):
    (tmp_path / "token").write_text("t")
    _ca(tmp_path / "ca.crt")
    return kube_api.Api(
        {
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
            "SERVICE_ACCOUNT_DIR": str(tmp_path),
            **env,
        }
    )


def test_a_ca_without_key_identifiers_is_trusted_and_still_checked(tmp_path):
    """Python 3.13 (the image's) sets VERIFY_X509_STRICT by default; the client clears it alone."""
    _ca(tmp_path / "ca.crt")
    context = kube_api.tls_context(str(tmp_path / "ca.crt"))
    assert not context.verify_flags & ssl.VERIFY_X509_STRICT
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_the_api_server_is_reached_without_the_pod_s_proxy(tmp_path, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    opener = _api(tmp_path)._open()
    # urllib's default opener would take HTTPS_PROXY (its ProxyHandler reads the environment).
    assert urllib.request.build_opener().handlers[0].proxies["https"] == "http://proxy.corp:3128"
    assert not [h for h in opener.handlers if getattr(h, "proxies", None)]


def test_a_replaced_ca_is_read_again(tmp_path):
    api = _api(tmp_path)
    first = api._open()
    assert api._open() is first
    _ca(tmp_path / "ca.crt")  # the kubelet's projected volume, after a CA rotation
    assert api._open() is not first


def test_an_ipv6_api_server_is_addressed_in_brackets(tmp_path):
    assert _api(tmp_path, KUBERNETES_SERVICE_HOST="fd00::1").server == "https://[fd00::1]:443"


def test_each_program_runs_alone_with_the_client_before_it():
    for name in ("apply_crds", "report_gpu_health"):
        text = programs.source(name)
        assert "from function" not in text and text.index("class Api:") < text.index("def main(")
        compile(text, name, "exec")
