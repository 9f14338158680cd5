"""A provider's failure reaches the XR in the provider's words: in ClusterReady or BackendReady,
failing resources first, and one Warning per resource; trimmed, deterministic, never a secret."""

import pytest

from function import failures
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from tests.builders import all_classes, example, provider_configs
from tests.unit import sim

EKS_ERROR = (
    "create failed: async create failed: failed to create the resource: [{0 creating EKS Cluster "
    "(eks-us-east): operation error EKS: CreateCluster, https response error StatusCode: 400, "
    "RequestID: 0f1e, InvalidParameterException: unsupported Kubernetes version 1.29  []}]"
)


def converged(name: str):
    xr, classes = example(name)
    required = all_classes(classes)
    if provider_configs(name):
        required["cloud-provider-config"] = provider_configs(name)
    return xr, required, sim.converge(xr, required)


def failing(observed, key: str, message: str, *, ready: bool = False) -> None:
    body = observed.resources[key].body
    body["status"]["conditions"] = [
        {"type": "Ready", "status": str(ready), "reason": "Available" if ready else "Creating"},
        {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message},
    ]


def condition(out, type_: str):
    return next(c for c in out.conditions if c.type == type_)


def test_a_cloud_resource_the_provider_cannot_create_is_named_in_cluster_ready_in_its_words():
    xr, required, out = converged("eks")
    observed = sim.reported(out)
    failing(observed, "cluster", EKS_ERROR)
    again = compose_cluster(xr, required, observed)
    ready = condition(again, "ClusterReady")
    assert ready.status is False
    assert ready.message.startswith("waiting for ")
    assert "cluster (create failed: " in ready.message
    assert "InvalidParameterException: unsupported Kubernetes version 1.29" in ready.message
    (warning,) = [
        r for r in again.results if r.reason == "ProviderError" and r.message.startswith("cluster ")
    ]
    assert warning.severity == "Warning"
    name = out.resources["cluster"].body["metadata"]["name"]
    assert warning.message.startswith(f"cluster (Cluster {name}): create failed")
    # The same observation gives the same words.
    assert compose_cluster(xr, required, observed).conditions == again.conditions


def test_failing_resources_come_first_in_the_wait_message():
    xr, required, out = converged("eks")
    observed = sim.reported(out)
    for key in ("cluster", "vpc"):
        observed.resources[key].body["status"]["conditions"] = [
            {"type": "Ready", "status": "False", "reason": "Creating"}
        ]
    failing(observed, "vpc", "VpcLimitExceeded: The maximum number of VPCs has been reached.")
    message = condition(compose_cluster(xr, required, observed), "ClusterReady").message
    assert message.index("vpc (VpcLimitExceeded") < message.index("cluster (Creating)")


def test_a_ready_resource_whose_update_fails_is_warned_and_the_cluster_stays_ready():
    xr, required, out = converged("gke")
    observed = sim.reported(out)
    failing(observed, "router-nat", "update failed: googleapi: Error 400: bad NAT", ready=True)
    again = compose_cluster(xr, required, observed)
    assert condition(again, "ClusterReady").status is True
    (warning,) = [r for r in again.results if r.reason == "ProviderError"]
    assert "router-nat (RouterNAT" in warning.message and "Error 400: bad NAT" in warning.message


def test_a_failed_release_is_named_in_backend_ready_in_helms_words():
    xr, required, out = converged("existing")
    observed = sim.reported(out)
    body = observed.resources["release-cert-manager"].body
    body["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Unavailable"}]
    body["status"]["atProvider"] = {
        "state": "failed",
        "releaseDescription": 'Release "mp-cert-manager" failed: context deadline exceeded',
    }
    again = compose_cluster(xr, required, observed)
    backend = condition(again, "BackendReady")
    assert backend.status is False
    assert (
        'release-cert-manager (Release "mp-cert-manager" failed: context deadline exceeded)'
        in backend.message
    )
    assert [r for r in again.results if r.reason == "ProviderError"]


def test_an_object_the_api_server_rejects_is_named_in_backend_ready():
    xr, required, out = converged("existing")
    observed = sim.reported(out)
    rejected = (
        'create failed: cannot create object: clusterissuers.cert-manager.io "x" is forbidden: '
        "ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: no issuers here"
    )
    key = next(k for k in observed.resources if k.startswith("gateway-ca-issuer"))
    failing(observed, key, rejected)
    backend = condition(compose_cluster(xr, required, observed), "BackendReady")
    assert f"{key} (create failed: cannot create object:" in backend.message
    assert "denied request: no issuers here" in backend.message


def test_an_observed_object_that_does_not_exist_yet_is_an_answer_not_a_warning():
    """An Observe-only Object of something another controller has still to write (the CA
    ConfigMap trust-manager publishes) or a detector's "not installed" is not a provider failure;
    the same words on an Object the function manages are."""
    xr, required, out = converged("existing")
    observed = sim.reported(out)
    gone = "cannot observe external resource: external resource does not exist"
    failing(observed, "gateway-ca-configmap", gone)
    failing(observed, "gateway-ca-issuer", gone)
    out = compose_cluster(xr, required, observed)
    warned = [r.message for r in out.results]
    assert any(m.startswith("gateway-ca-issuer (") for m in warned)
    assert not any(m.startswith("gateway-ca-configmap (") for m in warned)
    # Nor does BackendReady call it failing: it is waited for.
    backend = condition(out, "BackendReady").message
    assert "gateway-ca-issuer (cannot observe" in backend
    assert "gateway-ca-configmap (cannot observe" not in backend
    assert observed.resources["gateway-ca-configmap"].get("spec", "managementPolicies") == [
        "Observe"
    ]


@pytest.mark.parametrize(
    ("message", "kept", "gone"),
    [
        (
            "cannot parse kubeconfig: token: abcdefghijklmnop1234 is bad",
            "token: ",
            "abcdefghijklmnop",
        ),
        (
            "auth: Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln failed",
            "Authorization",
            "eyJ",
        ),
        (
            "bad key -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- x",
            "bad key",
            "MIIEow",
        ),
        (
            "client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo= rejected",
            "rejected",
            "LS0t",
        ),
        ("value " + "QUJD" * 20 + " refused", "refused", "QUJDQUJD"),
        ('{"password":"hunter22"} invalid', "invalid", "hunter22"),
    ],
)
def test_what_looks_like_a_secret_never_reaches_the_xr(message, kept, gone):
    shown = failures.words(message)
    assert kept in shown and gone not in shown and failures.REDACTED in shown


def test_the_words_are_the_first_line_folded_and_bounded():
    assert failures.words("first   line\n  second line") == "first line"
    long = failures.words("x " * 1000)
    assert len(long) == failures.LIMIT and failures.CUT in long
    # A long message keeps what the provider was doing and, at its end, why it failed.
    upjet = (
        "cannot apply Terraform plan: async create failed: failed to create the resource: [{0 "
        "creating EKS Cluster (mp-eks-us-east-cluster-dae66): operation error EKS: CreateCluster, "
        + "https response error StatusCode: 400, RequestID: 0f6e5c1a, "
        * 4
        + "UnsupportedAvailabilityZoneException: Cannot create cluster because us-east-1e, "
        "the targeted availability zone, does not currently have sufficient capacity  []}]"
    )
    shown = failures.words(upjet)
    assert len(shown) == failures.LIMIT
    assert shown.startswith("cannot apply Terraform plan: async create failed")
    assert shown.endswith("does not currently have sufficient capacity []}]")
    assert failures.words("") is None and failures.words(None) is None
    # Names of resources (dashes break a run) are not taken for secrets.
    name = "modelplane-system-gke-us-central-nodepool-gpu-h100-abc12-def34-ghi56"
    assert failures.words(f"cannot find {name}") == f"cannot find {name}"


def test_a_resource_without_a_failure_says_nothing():
    assert failures.failure(None) is None
    ok = {"status": {"conditions": [{"type": "Synced", "status": "True"}]}}
    assert failures.failure(ObservedResource(ok)) is None
    no_message = {"status": {"conditions": [{"type": "Synced", "status": "False", "reason": "X"}]}}
    assert failures.failure(ObservedResource(no_message)) == "X"


class ReadsNoted(dict):
    """Observed resources that note which were read."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def test_usages_are_never_read_since_crossplane_reports_no_failure_on_them():
    # Crossplane's Usage controller writes Available alone; its trouble goes to events.
    xr, required, out = converged("eks")
    reported = sim.reported(out)
    observed = Observed(ReadsNoted(reported.resources), reported.status)
    usages = {k for k, d in out.resources.items() if d.body["kind"] in ("Usage", "ClusterUsage")}
    assert len(usages) > 50
    again = compose_cluster(xr, required, observed)
    assert not usages & observed.resources.read
    assert usages <= again.resources.keys()
    # What providers report is still read of everything else.
    assert {"cluster", "vpc"} <= observed.resources.read
