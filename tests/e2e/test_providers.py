"""The real providers, standalone: provider-helm v1.3.0 and provider-kubernetes v1.3.1 as processes
(tests/e2e/providers.py) against a real control plane, installing real charts pulled from the
loopback chart server (tests/e2e/charts_server.py) by the hostnames the function's Releases name.

The target cluster is the management API server itself, through a kubeconfig Secret and one
ClusterProviderConfig per provider, as the function composes them. The control plane here is the
e2e one (tests/e2e/controlplane.py) with only Crossplane's and the two providers' CRDs: the
project's control plane also serves the workload CRDs (../shared/crds/workload), which the charts
would collide with when the management cluster stands in as the target. No kubelet runs, so the
charts are ones that need no pod: cert-manager's CRDs (and its Deployments, with `wait: false`)
from the HTTPS repository, the AI Gateway CRDs chart from the OCI registry (`wait: true`: CRDs
become Established without a pod).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.charts import UNCHECKED, converged, converged_examples, releases
from tests.conftest import crds_dir
from tests.e2e import charts_server
from tests.e2e.controlplane import (
    LOCALHOST,
    ControlPlane,
    StartupError,
    binaries,
    kubeconfig_text,
    module_dir,
    provider_crds,
    required_version,
)
from tests.e2e.kube import ApiError, Kube, condition, wait_for
from tests.e2e.providers import (
    INSIDE_TMP,
    NEBIUS_ACCOUNT,
    NEBIUS_IAM,
    NEBIUS_IAM_HOST,
    NEBIUS_KEY_ID,
    PROVIDERS,
    Providers,
    hosts_file,
    in_namespace,
    namespace_env,
    private_tmp,
    provider_binaries,
)

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "modelplane-system"
TARGET = "providers-e2e-target"  # the kubeconfig Secret and both ClusterProviderConfigs
HELM = "helm.m.crossplane.io/v1beta1"
KUBERNETES = "kubernetes.m.crossplane.io/v1alpha1"
CRD = "apiextensions.k8s.io/v1"


# --- What needs no cluster. -----------------------------------------------------------------------


def test_every_release_the_function_composes_is_served():
    """Each Release of every converged example names a chart the server serves, under the hostname
    it dials; the charts without a public source from our stand-ins."""
    served = {(c.repository, c.name, c.version): c for c in charts_server.wanted()}
    hosts = set(charts_server.hostnames(served.values()))
    named = {
        (chart["repository"], chart["name"], chart["version"])
        for example in converged_examples()
        for release in releases(example)
        for chart in [release["spec"]["forProvider"]["chart"]]
    }
    assert named <= set(served), sorted(named - set(served))
    assert not [key for key, c in served.items() if c.folder is None]
    stand_ins = {
        key[1]
        for key, c in served.items()
        if c.folder.is_relative_to(charts_server.STAND_IN_CHARTS)
    }
    assert stand_ins == set(UNCHECKED) == charts_server.STAND_INS
    assert {c.host for c in served.values()} <= hosts
    assert "registry-1.docker.io" in hosts  # what oras-go dials for docker.io


PROVIDER_HELM_MODULE = "github.com/crossplane-contrib/provider-helm"
CONFIGURATION = ROOT / "package" / "configuration" / "crossplane.yaml"


def _unknown_fields(value, schema: dict, path: str) -> list[str]:
    """The paths in value that schema (an OpenAPI v3 schema of a CRD) does not declare."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is None:
            return []  # a map (additionalProperties) or free-form object
        return [
            bad
            for key, inner in value.items()
            for bad in (
                _unknown_fields(inner, props[key], f"{path}.{key}")
                if key in props
                else [f"{path}.{key}"]
            )
        ]
    if isinstance(value, list):
        items = schema.get("items") or {}
        return [b for i, v in enumerate(value) for b in _unknown_fields(v, items, f"{path}[{i}]")]
    return []


def _proved_helm_crd(kind: str) -> dict:
    """The v1beta1 spec schema of a helm.m kind as the provider-helm the e2e runs declares it
    (its module's package/crds, read in place)."""
    version = required_version(ROOT / "tests/tools/providers/helm/go.mod", PROVIDER_HELM_MODULE)
    folder = module_dir(PROVIDER_HELM_MODULE, version, ROOT / "tests/tools/providers/helm")
    crd = yaml.safe_load((folder / f"package/crds/helm.m.crossplane.io_{kind}.yaml").read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return served["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_releases_need_nothing_the_proved_provider_helm_lacks():
    """The e2e runs provider-helm v1.3.0 (the newest the Go module proxy serves whole); every
    Release the function composes uses only fields its Release CRD declares, nothing of v1.4.0
    (forProvider.ssaForceConflicts), so what the e2e proves holds for the Release as composed."""
    spec = _proved_helm_crd("releases")
    assert "ssaForceConflicts" not in spec["properties"]["forProvider"]["properties"]
    composed = [r for example in converged_examples() for r in releases(example)]
    assert composed
    unknown = {b for r in composed for b in _unknown_fields(r["spec"], spec, "spec")}
    assert not unknown, sorted(unknown)
    assert _unknown_fields({"forProvider": {"ssaForceConflicts": True}}, spec, "spec")


def test_the_configuration_needs_provider_helm_v1_4_for_nebius():
    """Why the Configuration depends on v1.4.0 and not on the v1.3.0 the e2e runs: v1.3.0's
    ClusterProviderConfig has no NebiusServiceAccountCredentials identity (v1.4.0 links
    provider-kubernetes v1.3.x's client, which added it), and a Nebius cluster's helm
    ClusterProviderConfig needs it. Every other ProviderConfig would do with v1.3.0."""
    types = _proved_helm_crd("clusterproviderconfigs")["properties"]["identity"]["properties"]
    proved = set(types["type"]["enum"])
    shared = yaml.safe_load(
        (
            Path(os.environ.get("CRDS_DIR") or crds_dir())
            / "provider-helm"
            / "helm.m.crossplane.io_clusterproviderconfigs.yaml"
        ).read_text()
    )
    (v1beta1,) = [v for v in shared["spec"]["versions"] if v["name"] == "v1beta1"]
    shared_identity = v1beta1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert (
        "NebiusServiceAccountCredentials"
        in shared_identity["identity"]["properties"]["type"]["enum"]
    )
    needs = {
        (example, identity["type"])
        for example in converged_examples()
        for d in converged(example)
        if d["apiVersion"].startswith("helm.m.") and d["kind"] == "ClusterProviderConfig"
        for identity in [d["spec"].get("identity")]
        if identity and identity["type"] not in proved
    }
    assert needs == {("nebius", "NebiusServiceAccountCredentials")}
    deps = yaml.safe_load(CONFIGURATION.read_text())["spec"]["dependsOn"]
    assert [d["version"] for d in deps if d["package"].endswith("/provider-helm")] == ["v1.4.0"]


def test_every_served_chart_pulls_with_the_real_helm_by_its_hostname(tmp_path):
    """The real Helm CLI (v3.21.1, what provider-helm v1.3.0 links), in the providers' namespace setup,
    pulls every served chart as its Release names it, byte for byte the archive packaged; the
    chart that is not served is not found."""
    server, info = charts_server.serve(tmp_path / "charts")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2})
    thread.start()
    try:
        hosts = tmp_path / "hosts"
        hosts.write_text(hosts_file(info["address"], info["hostnames"]))
        tmp = private_tmp(tmp_path / "tmp", Path(info["ca"]))
        (tmp / "pulled").mkdir()
        env = {**os.environ, **namespace_env()}
        outcome = {}
        for chart in charts_server.wanted():
            if chart.oci:
                args = ["pull", f"{chart.repository}/{chart.name}"]
            else:
                args = ["pull", chart.name, "--repo", chart.repository]
            args += ["--version", chart.version, "--destination", f"{INSIDE_TMP}/pulled"]
            argv = in_namespace([charts_server.helm_bin(), *args], hosts, tmp)
            proc = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=120, check=False
            )
            outcome[chart] = proc
        for chart, proc in outcome.items():
            if chart.folder is None:
                assert proc.returncode != 0
                assert "not found" in proc.stderr
                continue
            assert proc.returncode == 0, proc.stderr
            name = f"{chart.name}-{chart.version}.tgz"
            packaged = tmp_path / "charts" / "packages" / chart.host / chart.path / name
            assert (tmp / "pulled" / name).read_bytes() == packaged.read_bytes()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    hosts_asked = {
        r["host"] for r in map(json.loads, Path(info["requests"]).read_text().splitlines())
    }
    assert hosts_asked == set(info["hostnames"]) - {"docker.io"}  # oras-go dials registry-1


def test_the_management_control_plane_serves_the_providers_crds():
    """The project's control plane installs the provider CRDs of ../shared/crds: every kind the
    function composes for them, and the ProviderConfigUsage CRDs the real providers need (their
    ProviderConfig controllers are gated on them, config.go SetupGated, and every managed
    resource's Connect records a usage), read there and nowhere else."""
    paths = provider_crds(Path(os.environ.get("CRDS_DIR") or crds_dir()))
    names = {yaml.safe_load(p.read_text())["metadata"]["name"]: p for p in paths}
    for plural in ("releases", "providerconfigs", "clusterproviderconfigs", "providerconfigusages"):
        assert f"{plural}.helm.m.crossplane.io" in names
    for plural in ("objects", "providerconfigs", "clusterproviderconfigs", "providerconfigusages"):
        assert f"{plural}.kubernetes.m.crossplane.io" in names
    for group in ("helm", "kubernetes"):
        usage = names[f"providerconfigusages.{group}.crossplane.io"]
        assert usage.parent.name == f"provider-{group}"


# --- The providers running. -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """A control plane with the providers' CRDs, and the chart server and both providers on it."""
    try:
        binaries()
        provider_binaries()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    folder = Path(os.environ.get("CRDS_DIR") or crds_dir())
    crds = [p for p in provider_crds(folder) if p.parent.name in PROVIDERS]
    cp = ControlPlane(tmp_path_factory.mktemp("providers"), crds=crds)
    providers = Providers(cp)
    try:
        cp.start()
        providers.start()
    except StartupError as e:
        cp.stop()
        pytest.fail(f"did not start: {e}")
    try:
        yield cp, providers
    finally:
        providers.stop()
        cp.stop()


@pytest.fixture(scope="module")
def target(running) -> Kube:
    """The kubeconfig Secret of the management API server and a ClusterProviderConfig per
    provider reading it (the shape the function composes, function/providerconfigs.py)."""
    cp, providers = running
    kube = cp.kube
    assert kube is not None
    kubeconfig = (providers.workdir / "provider-helm" / "tmp" / "kubeconfig").read_bytes()
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": TARGET, "namespace": NAMESPACE},
            "data": {"kubeconfig": base64.b64encode(kubeconfig).decode()},
        }
    )
    credentials = {
        "source": "Secret",
        "secretRef": {"namespace": NAMESPACE, "name": TARGET, "key": "kubeconfig"},
    }
    for api in (HELM, KUBERNETES):
        kube.apply(
            {
                "apiVersion": api,
                "kind": "ClusterProviderConfig",
                "metadata": {"name": TARGET},
                "spec": {"credentials": credentials},
            }
        )
    return kube


def _managed(api: str, kind: str, name: str, for_provider: dict, **spec) -> dict:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "forProvider": for_provider,
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": TARGET},
            **spec,
        },
    }


def _wait_ready(kube: Kube, providers: Providers, obj: dict, timeout: float = 240) -> dict:
    api, kind, name = obj["apiVersion"], obj["kind"], obj["metadata"]["name"]
    seen: dict = {}

    def ready() -> bool:
        seen.update(kube.get(api, kind, name, NAMESPACE))
        return all(condition(seen, c).get("status") == "True" for c in ("Ready", "Synced"))

    try:
        wait_for(
            ready, timeout=timeout, what=f"{kind} {name} Ready", interval=1, ignore=(ApiError,)
        )
    except TimeoutError:
        pytest.fail(
            f"{kind} {name} not Ready: {seen.get('status')}\n{providers.logs(60)}",
        )
    return seen


def _established(kube: Kube, name: str) -> bool:
    crd = kube.get_or_none(CRD, "CustomResourceDefinition", name)
    return condition(crd, "Established").get("status") == "True"


def test_provider_helm_installs_a_chart_from_an_https_repository(running, target):
    """cert-manager v1.20.2 as the function names it (https://charts.jetstack.io), its CRDs on."""
    _, providers = running
    chart = {
        "name": "cert-manager",
        "repository": "https://charts.jetstack.io",
        "version": "v1.20.2",
    }
    release = _managed(
        HELM,
        "Release",
        "providers-e2e-cert-manager",
        {
            "chart": chart,
            "namespace": "cert-manager",
            # No kubelet: the post-install check Job would never finish; wait only for hooks.
            "values": {"crds": {"enabled": True}, "startupapicheck": {"enabled": False}},
            "wait": False,
        },
    )
    target.apply(release)
    got = _wait_ready(target, providers, release)
    assert got["status"]["atProvider"]["state"] == "deployed"
    assert got["status"]["atProvider"]["version"] == "v1.20.2"
    assert _established(target, "certificates.cert-manager.io")
    asked = {(r["host"], r["path"], r["status"]) for r in providers.requests()}
    assert ("charts.jetstack.io", "/index.yaml", 200) in asked
    assert ("charts.jetstack.io", "/cert-manager-v1.20.2.tgz", 200) in asked


def test_provider_helm_installs_a_chart_from_an_oci_registry(running, target):
    """ai-gateway-crds-helm v1.1.0 from oci://docker.io/envoyproxy, waiting for its CRDs."""
    _, providers = running
    chart = {
        "name": "ai-gateway-crds-helm",
        "repository": "oci://docker.io/envoyproxy",
        "version": "v1.1.0",
    }
    release = _managed(
        HELM,
        "Release",
        "providers-e2e-ai-gateway-crds",
        {"chart": chart, "namespace": "envoy-ai-gateway-system", "wait": True},
    )
    target.apply(release)
    got = _wait_ready(target, providers, release)
    assert got["status"]["atProvider"]["state"] == "deployed"
    assert _established(target, "aigatewayroutes.aigateway.envoyproxy.io")
    asked = {(r["host"], r["path"], r["status"]) for r in providers.requests()}
    manifest = "/v2/envoyproxy/ai-gateway-crds-helm/manifests/v1.1.0"
    assert ("registry-1.docker.io", manifest, 200) in asked


def test_provider_kubernetes_applies_an_object_and_its_readiness_query_holds(running, target):
    """An Object with a CEL readiness query over the remote object, as the function composes."""
    _, providers = running
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "providers-e2e", "namespace": NAMESPACE},
        "data": {"ready": "yes"},
    }
    obj = _managed(
        KUBERNETES,
        "Object",
        "providers-e2e-configmap",
        {"manifest": manifest},
        readiness={"policy": "DeriveFromCelQuery", "celQuery": "object.data.ready == 'yes'"},
    )
    target.apply(obj)
    got = _wait_ready(target, providers, obj, timeout=120)
    assert got["status"]["atProvider"]["manifest"]["data"] == {"ready": "yes"}
    applied = target.get("v1", "ConfigMap", "providers-e2e", NAMESPACE)
    assert applied["data"] == {"ready": "yes"}


def test_deleting_a_release_uninstalls_it(running, target):
    """provider-helm uninstalls a deleted Release: its workloads and Helm's release Secrets go,
    the CRDs stay (cert-manager's `crds.keep`, helm.sh/resource-policy: keep), and the managed
    resource goes once the provider removes its finalizer."""
    _, providers = running
    name = "providers-e2e-cert-manager"
    assert target.get("apps/v1", "Deployment", "providers-e2e-cert-manager", "cert-manager")
    target.delete(HELM, "Release", name, NAMESPACE)

    def gone() -> bool:
        secrets = target.list("v1", "Secret", namespace="cert-manager")
        return (
            target.get_or_none(HELM, "Release", name, NAMESPACE) is None
            and not [s for s in secrets if s.get("type") == "helm.sh/release.v1"]
            and not target.list("apps/v1", "Deployment", namespace="cert-manager")
        )

    try:
        wait_for(gone, timeout=120, what=f"Release {name} uninstalled", interval=1)
    except TimeoutError as e:
        pytest.fail(f"{e}\n{providers.logs(40)}")
    assert _established(target, "certificates.cert-manager.io")


NEBIUS_TARGET = "providers-e2e-nebius"
EXCHANGE = "/nebius.iam.v1.TokenExchangeService/Exchange"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _subject_jwt(key: rsa.RSAPrivateKey, claims: dict) -> str:
    """An RS256 JWT as gosdk's ServiceAccountExchangeTokenRequester signs it (auth/exchangable.go)."""
    header = {"alg": "RS256", "typ": "JWT", "kid": NEBIUS_KEY_ID}
    signing = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
    signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing}.{_b64url(signature)}"


def _exchange_request(subject: str) -> bytes:
    """nebius.iam.v1.ExchangeTokenRequest, fields 1-4 (gosdk proto/nebius/iam/v1/token_service.pb.go)."""
    fields = [
        "urn:ietf:params:oauth:grant-type:token-exchange",
        "urn:ietf:params:oauth:token-type:access_token",
        subject,
        "urn:ietf:params:oauth:token-type:jwt",
    ]
    out = b""
    for number, value in enumerate(fields, 1):
        data = value.encode()
        length, size = b"", len(data)
        while True:
            byte, size = size & 0x7F, size >> 7
            length += bytes([byte | (0x80 if size else 0)])
            if not size:
                break
        out += bytes([number << 3 | 2]) + length + data
    return out


def test_the_nebius_iam_stand_in_accepts_only_the_service_accounts_key(running):
    """The stand-in answers a JWT signed by the service account's key with the token, and one
    signed by another key, or for another account, with PERMISSION_DENIED."""
    cp, providers = running
    providers.nebius_token_file.write_text(cp.token)
    own = serialization.load_pem_private_key(
        json.loads(providers.nebius_credentials)["private_key"].encode(), None
    )
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    claims = {
        "iss": NEBIUS_ACCOUNT,
        "sub": NEBIUS_ACCOUNT,
        "aud": ["token-service.iam.new.nebiuscloud.net"],
        "iat": now,
        "exp": now + 60,
    }
    credentials = grpc.ssl_channel_credentials(cp.pki.ca_file.read_bytes())
    options = [("grpc.ssl_target_name_override", NEBIUS_IAM_HOST)]
    with grpc.secure_channel(f"{providers.nebius_address}:443", credentials, options) as channel:
        exchange = channel.unary_unary(EXCHANGE)
        answer = exchange(_exchange_request(_subject_jwt(own, claims)), timeout=10)
        assert cp.token.encode() in answer
        wrong = [
            _subject_jwt(other, claims),
            _subject_jwt(own, {**claims, "sub": "serviceaccount-other"}),
            _subject_jwt(own, {**claims, "exp": now - 10}),
        ]
        for subject in wrong:
            with pytest.raises(grpc.RpcError) as denied:
                exchange(_exchange_request(subject), timeout=10)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_provider_kubernetes_authenticates_with_a_nebius_service_account(running, target):
    """A ClusterProviderConfig as the function composes one for Nebius (function/providerconfigs.py):
    a kubeconfig with the endpoint and CA only, and the NebiusServiceAccountCredentials identity
    naming a service account's credentials.json. provider-kubernetes' gosdk signs a JWT with that
    key and exchanges it at the Nebius IAM stand-in (tokens.iam.api.nebius.cloud), which checks the
    signature and answers with the API server's token: the Object is applied only through that."""
    cp, providers = running
    providers.nebius_token_file.write_text(cp.token)
    stand_in = providers.process(NEBIUS_IAM)
    seen = len(stand_in.tail(10**6).splitlines())
    kubeconfig = kubeconfig_text(f"https://{LOCALHOST}:{cp.ports.apiserver}", cp.pki, None)
    assert "token" not in kubeconfig
    secrets = {"kubeconfig": kubeconfig, "credentials.json": providers.nebius_credentials}
    for key, value in secrets.items():
        target.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"{NEBIUS_TARGET}-{key.split('.')[0]}",
                    "namespace": NAMESPACE,
                },
                "stringData": {key: value},
            }
        )
    ref = {"namespace": NAMESPACE, "name": f"{NEBIUS_TARGET}-kubeconfig", "key": "kubeconfig"}
    identity = {"namespace": NAMESPACE, "name": f"{NEBIUS_TARGET}-credentials"}
    target.apply(
        {
            "apiVersion": KUBERNETES,
            "kind": "ClusterProviderConfig",
            "metadata": {"name": NEBIUS_TARGET},
            "spec": {
                "credentials": {"source": "Secret", "secretRef": ref},
                "identity": {
                    "type": "NebiusServiceAccountCredentials",
                    "source": "Secret",
                    "secretRef": {**identity, "key": "credentials.json"},
                },
            },
        }
    )
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NEBIUS_TARGET, "namespace": NAMESPACE},
        "data": {"through": "nebius-iam"},
    }
    obj = _managed(KUBERNETES, "Object", NEBIUS_TARGET, {"manifest": manifest})
    obj["spec"]["providerConfigRef"]["name"] = NEBIUS_TARGET
    target.apply(obj)
    _wait_ready(target, providers, obj, timeout=120)
    assert target.get("v1", "ConfigMap", NEBIUS_TARGET, NAMESPACE)["data"] == manifest["data"]
    log = stand_in.tail(10**6).splitlines()[seen:]
    calls = [json.loads(line) for line in log if line.startswith("{")]
    assert calls and all(c.get("ok") for c in calls), calls


def test_every_process_stops_by_its_pid(running):
    """Stopping leaves no provider, chart server or Nebius IAM stand-in running (each stopped
    by its PID)."""
    _, providers = running
    pids = [p.pid for p in providers.processes]
    assert len(pids) == 4
    providers.stop()
    assert not [p.name for p in providers.processes if p.alive()]
    for pid in pids:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )
