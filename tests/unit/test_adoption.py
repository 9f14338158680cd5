"""Adoption on Existing clusters: a cert-manager someone else installed is adopted, never installed
beside; an absent one is installed; what the function installed stays its own."""

import copy

import pytest

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.serving import adoption
from tests.builders import all_classes, example, world_for
from tests.sim.providers import conditions, observe
from tests.sim.workload import inference_gateway
from tests.unit import sim

SCHEMAS = {"inference-gateway-kind": True}
DETECT = adoption.detector_key("cert-manager")
RELEASE = "release-cert-manager"
# What comes after cert-manager in the table (function/serving/components.py).
AFTER_CERT_MANAGER = ("release-trust-manager", "gateway-selfsigned-issuer")


def required(classes):
    return {**all_classes(classes), "inference-gateways": [inference_gateway("fleet-a")]}


def crd(release: str | None, version: str = "v1.17.2", fields: bool = True) -> dict:
    """certificates.cert-manager.io as the API server has it (only what the function reads)."""
    spec_props: dict = {"issuerRef": {"type": "object"}}
    if fields:
        spec_props["privateKey"] = {"properties": {"rotationPolicy": {"type": "string"}}}
        spec_props["revisionHistoryLimit"] = {"type": "integer"}
    meta: dict = {
        "name": "certificates.cert-manager.io",
        "labels": {"app.kubernetes.io/version": version},
    }
    if release:
        meta["annotations"] = {
            "meta.helm.sh/release-name": release,
            "meta.helm.sh/release-namespace": "platform",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": {
            "versions": [
                {
                    "name": "v1",
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"properties": {"spec": {"properties": spec_props}}}
                    },
                }
            ]
        },
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }


ABSENT = {
    "conditions": conditions(
        ready=False,
        reason="ReconcileError",
        message="cannot observe external resource: external resource does not exist",
    )
}


def detector_status(found: dict | None) -> dict:
    if found is None:
        return ABSENT
    return {"conditions": conditions(), "atProvider": {"manifest": found}}


def run(found: dict | None, passes: int = 25, start=None):
    """Reconciles of the Existing example; the detector finds `found` (None: nothing)."""
    xr, classes = example("existing")
    out = start or compose_cluster(xr, required(classes), Observed(), SCHEMAS)
    for _ in range(passes):
        resources = {}
        for key, desired in out.resources.items():
            body = copy.deepcopy(desired.body)
            body["status"] = detector_status(found) if key == DETECT else observe(body).status
            resources[key] = ObservedResource(body)
        out = compose_cluster(
            xr, required(classes), Observed(resources=resources, status=out.status), SCHEMAS
        )
    return out


def condition(out, kind):
    return next(c for c in out.conditions if c.type == kind)


def test_nothing_of_cert_manager_is_installed_before_the_cluster_is_looked_at():
    xr, classes = example("existing")
    out = compose_cluster(xr, required(classes), Observed(), SCHEMAS)
    for _ in range(3):  # the ProviderConfigs, then the detector
        resources = {}
        for key, desired in out.resources.items():
            body = copy.deepcopy(desired.body)
            body["status"] = observe(body).status
            resources[key] = ObservedResource(body)
        if DETECT in resources:
            del resources[DETECT]  # composed, not observed yet
            break
        out = compose_cluster(xr, required(classes), Observed(resources=resources), SCHEMAS)
    assert DETECT in out.resources
    assert RELEASE not in out.resources
    assert out.resources[DETECT].body["spec"]["managementPolicies"] == ["Observe"]
    manifest = out.resources[DETECT].body["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"] == {"name": "certificates.cert-manager.io"}
    # Asked again with the detector composed but not observed: still nothing installed.
    again = compose_cluster(xr, required(classes), Observed(resources=resources), SCHEMAS)
    assert RELEASE not in again.resources and DETECT in again.resources


def test_an_absent_cert_manager_is_installed():
    out = run(None)
    assert RELEASE in out.resources
    assert condition(out, "BackendReady").status is True
    # "Does not exist" is the detector's answer, not a provider failure.
    assert not [r for r in out.results if r.reason == "ProviderError"]


def test_a_cert_manager_of_another_release_is_adopted_and_the_stack_goes_on():
    out = run(crd("platform-cert-manager"))
    assert RELEASE not in out.resources
    assert all(k in out.resources for k in AFTER_CERT_MANAGER)
    backend = condition(out, "BackendReady")
    assert backend.status is True, backend.message
    (adopted,) = [r for r in out.results if r.reason == "ComponentAdopted"]
    assert adopted.severity == "Normal"
    assert "Helm release platform/platform-cert-manager (v1.17.2)" in adopted.message


def test_a_cert_manager_outside_helm_is_adopted_too():
    out = run(crd(None))
    assert RELEASE not in out.resources
    assert "an install outside Helm" in next(
        r.message for r in out.results if r.reason == "ComponentAdopted"
    )


def test_the_functions_own_kept_crds_are_installed_over_again():
    out = run(crd("mp-cert-manager"))
    assert RELEASE in out.resources


def test_a_cert_manager_too_old_for_the_stack_is_named_and_the_stack_waits():
    out = run(crd("platform-cert-manager", "v1.1.0", fields=False))
    assert RELEASE not in out.resources
    assert not any(k in out.resources for k in AFTER_CERT_MANAGER)
    (refused,) = [r for r in out.results if r.reason == "AdoptionRefused"]
    assert refused.severity == "Warning"
    assert "spec.privateKey.rotationPolicy, spec.revisionHistoryLimit" in refused.message
    assert condition(out, "BackendReady").status is False
    assert out.ready is False


def test_what_the_function_installed_stays_when_another_appears():
    installed = run(None)
    assert RELEASE in installed.resources
    later = run(crd("platform-cert-manager"), passes=3, start=installed)
    assert RELEASE in later.resources
    assert not [r for r in later.results if r.reason == "ComponentAdopted"]


@pytest.mark.parametrize("source", ["eks", "aks"])
def test_a_provisioned_cluster_looks_for_nothing(source):
    xr, classes = example(source)
    out = sim.converge(xr, required(classes), world_for(xr), SCHEMAS)
    assert DETECT not in out.resources
    assert RELEASE in out.resources
