"""Round trips against the real server process: python -m function, over insecure gRPC and mTLS."""

import datetime
import ipaddress
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.builders import example
from tests.tools.server import function_server


def request(source: str = "existing") -> fnv1.RunFunctionRequest:
    xr, classes = example(source)
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for c in classes:
        req.required_resources["inference-classes"].items.add().resource.update(c)
    return req


def call(channel: grpc.Channel, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=10)


def test_console_script_and_module_take_the_same_flags():
    script = Path(sys.executable).parent / "function"
    as_script = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    as_module = subprocess.run(
        [sys.executable, "-m", "function", "--help"], capture_output=True, text=True, check=True
    )
    assert as_script.stdout == as_module.stdout
    for flag in (
        "--insecure",
        "--tls-certs-dir",
        "--address",
        "--debug",
        "--max-recv-message-size",
    ):
        assert flag in as_script.stdout


def test_startup_failure_is_one_line_not_a_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "function", f"--tls-certs-dir={tmp_path}", "--address=127.0.0.1:0"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert proc.returncode != 0
    assert "cannot run function:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_insecure_round_trip_composes_an_existing_cluster():
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        rsp = call(channel, request())
    assert sorted(rsp.desired.resources) == ["provider-config-helm", "provider-config-kubernetes"]
    pc = resource.struct_to_dict(rsp.desired.resources["provider-config-kubernetes"].resource)
    assert pc["kind"] == "ClusterProviderConfig"
    assert rsp.desired.resources["provider-config-kubernetes"].ready == fnv1.READY_TRUE
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["providerConfigRef"]["name"] == pc["metadata"]["name"]
    assert status["gpuPools"][0]["nodes"] == 2
    # Not reached yet: ClusterReady only once the workload cluster has answered.
    assert {c.type: c.status for c in rsp.conditions} == {
        "ClusterReady": fnv1.STATUS_CONDITION_FALSE,
        "BackendReady": fnv1.STATUS_CONDITION_FALSE,
        "GPUsPublished": fnv1.STATUS_CONDITION_FALSE,
        "GPUsHealthy": fnv1.STATUS_CONDITION_FALSE,
        "ClassesResolved": fnv1.STATUS_CONDITION_TRUE,
    }
    # Nothing installed yet: the XR is not Ready, whatever its composed resources say.
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    # The fleet's InferenceGateway kind may not exist: its schema is asked for, not its objects.
    assert rsp.requirements.schemas["inference-gateway-kind"].kind == "InferenceGateway"
    assert "inference-gateways" not in rsp.requirements.resources
    # Not ready: Crossplane looks again in 15 s, not the settled 60 s.
    assert rsp.meta.ttl.seconds == 15


def test_bad_input_is_a_fatal_result_naming_the_field_not_a_traceback():
    req = request()
    req.observed.composite.resource["spec"]["nodePools"][0]["nodeCount"] = "two"
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        rsp = call(channel, req)
    [result] = rsp.results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert "spec.nodePools[0].nodeCount" in result.message
    assert "'two'" in result.message
    assert "Traceback" not in result.message
    assert len(rsp.desired.resources) == 0


def test_unknown_kind_is_fatal():
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update({"apiVersion": "x/v1", "kind": "Other"})
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        rsp = call(channel, req)
    assert rsp.results[0].severity == fnv1.SEVERITY_FATAL
    assert "not kind 'Other'" in rsp.results[0].message


def test_v1beta1_callers_get_the_v1_answer():
    """Older Crossplane releases call the v1beta1 service: the same messages, another package."""
    req = request()
    beta_req = fnv1beta1.RunFunctionRequest.FromString(req.SerializeToString())
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        beta = grpcv1beta1.FunctionRunnerServiceStub(channel).RunFunction(beta_req, timeout=10)
        v1 = call(channel, req)
    assert beta.SerializeToString(deterministic=True) == v1.SerializeToString(deterministic=True)
    assert "provider-config-kubernetes" in beta.desired.resources


def test_same_request_gives_byte_identical_desired_state():
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        first = call(channel, request())
        second = call(channel, request())
    assert first.desired.SerializeToString(deterministic=True) == second.desired.SerializeToString(
        deterministic=True
    )


def malloc_arenas(pid: int) -> int:
    """glibc malloc's arenas besides the main one: each is a heap mapped anonymously at a 64 MiB
    boundary (HEAP_MAX_SIZE on 64-bit)."""
    count = 0
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        address, _perms, _offset, _device, inode, *path = line.split()
        start = int(address.split("-")[0], 16)
        count += inode == "0" and not path and start % (64 << 20) == 0
    return count


def test_server_threads_share_one_malloc_arena():
    """Under concurrent callers gRPC's threads all allocate; each arena would keep its own peak."""
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: call(channel, request()), range(32)))
        assert {len(a.desired.resources) for a in answers} == {2}
        assert malloc_arenas(server.pid) == 0


def _cert(name: str, issuer_key, issuer_name, *, ca: bool, key=None):
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer_name or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return key, cert


def _pem(key, cert) -> tuple[bytes, bytes]:
    return (
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        cert.public_bytes(serialization.Encoding.PEM),
    )


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    """tls.crt, tls.key and ca.crt as Crossplane mounts them, plus a client pair signed by the CA."""
    ca_key, ca = _cert("test-ca", None, None, ca=True)
    server_key, server = _cert("function", ca_key, ca.subject, ca=False)
    client_key, client = _cert("crossplane", ca_key, ca.subject, ca=False)
    (tmp_path / "ca.crt").write_bytes(_pem(ca_key, ca)[1])
    key_pem, crt_pem = _pem(server_key, server)
    (tmp_path / "tls.key").write_bytes(key_pem)
    (tmp_path / "tls.crt").write_bytes(crt_pem)
    key_pem, crt_pem = _pem(client_key, client)
    (tmp_path / "client.key").write_bytes(key_pem)
    (tmp_path / "client.crt").write_bytes(crt_pem)
    return tmp_path


def test_mtls_round_trip_and_a_client_without_a_certificate_is_refused(tls_dir: Path):
    ca = (tls_dir / "ca.crt").read_bytes()
    good = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=(tls_dir / "client.key").read_bytes(),
        certificate_chain=(tls_dir / "client.crt").read_bytes(),
    )
    anonymous = grpc.ssl_channel_credentials(root_certificates=ca)
    with function_server(f"--tls-certs-dir={tls_dir}", insecure=False) as server:
        target = server.target
        with grpc.secure_channel(target, good) as channel:
            rsp = call(channel, request())
        assert "provider-config-helm" in rsp.desired.resources
        with grpc.secure_channel(target, anonymous) as channel, pytest.raises(grpc.RpcError):
            call(channel, request())
