"""No secret material leaves the function: not in its answers, not in its logs (debug included).

The function never reads a Secret: it references them by name, and of a composed resource's
connection details it looks at the key names only. These tests hand it secret material where a
control plane would (connection details of the kubeconfig writer, a private key where a CA
certificate belongs, credentials in a cloud ProviderConfig) and check nothing comes back; then,
running last, they scan everything the session produced (every server's debug log, every render
of the convergence tests, the golden files) for private keys, tokens and the planted secrets.
"""

import os
import re
from pathlib import Path

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from tests.builders import provider_configs
from tests.conftest import ROOT
from tests.test_grpc import call, request
from tests.tools.server import function_server

SENTINEL = "s3cr3t-SENTINEL-do-not-leak"
PRIVATE_KEY = (
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI" + SENTINEL + "\n-----END EC PRIVATE KEY-----\n"
)
KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: " + SENTINEL + "-token,"
    " client-key-data: " + SENTINEL + "-key}}]\n"
)
# What secret material looks like, wherever it turns up.
LEAKS = re.compile(
    rf"PRIVATE KEY-----|client-key-data|{SENTINEL}|token: simulated-|\btoken: [A-Za-z0-9._-]{{20,}}"
)


def secret_laden_request(source: str) -> fnv1.RunFunctionRequest:
    req = request(source)
    auth = req.observed.resources["cluster-auth"]
    auth.resource.update(
        {
            "apiVersion": "eks.aws.m.upbound.io/v1beta1",
            "kind": "ClusterAuth",
            "metadata": {"name": "auth", "namespace": "modelplane-system"},
            "spec": {"forProvider": {"region": "us-east-2"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    auth.connection_details["kubeconfig"] = KUBECONFIG.encode()
    ca = req.observed.resources["gateway-ca-configmap"]
    ca.resource.update(
        {
            "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
            "kind": "Object",
            "metadata": {"name": "ca", "namespace": "modelplane-system"},
            "status": {"atProvider": {"manifest": {"data": {"ca.crt": PRIVATE_KEY}}}},
        }
    )
    for config in provider_configs(source):
        config["spec"]["credentials"]["secretRef"]["key"] = SENTINEL
        req.required_resources["cloud-provider-config"].items.add().resource.update(config)
    return req


def test_secret_material_handed_to_the_function_never_comes_back():
    with function_server() as server, grpc.insecure_channel(server.target) as channel:
        for source in ("eks", "gke", "existing"):
            rsp = call(channel, secret_laden_request(source))
            text = rsp.SerializeToString().decode("utf-8", "replace")
            assert "PRIVATE KEY" not in text and "client-key-data" not in text
            assert f"{SENTINEL}-token" not in text
            # A Secret's key name is a reference, not material: referencing it is allowed.
            assert "caCertificate" not in str(rsp.desired.composite.resource)


def produced() -> list[Path]:
    """What the session produced that carries the function's output or logs."""
    base = Path(os.environ["FUNCTION_LOG_DIR"]).parent
    files = sorted((base / "function-logs").glob("*.log"))
    files += sorted(base.rglob("rendered.yaml"))
    files += sorted((ROOT / "tests" / "golden").glob("*.yaml"))
    return files


def test_nothing_the_session_produced_holds_secret_material():
    files = produced()
    logs = [f for f in files if f.suffix == ".log"]
    assert logs, "no function logs: FUNCTION_LOG_DIR was not honoured"
    assert any(f.stat().st_size for f in logs), "the function logged nothing at debug level"
    found = []
    for path in files:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if LEAKS.search(line):
                found.append(f"{path}:{n}: {line[:160]}")
    assert not found, "secret material found:\n" + "\n".join(found[:20])
    # The scan sees what it scans for: the simulator's kubeconfigs would trip it.
    assert LEAKS.search("users: [{user: {token: simulated-0123456789abcdef}}]")
    assert LEAKS.search(PRIVATE_KEY) and LEAKS.search(KUBECONFIG)
