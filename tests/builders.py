"""Small builders for test inputs: the bundled examples, loaded as dicts, and observed resources."""

import copy
from pathlib import Path

import yaml

from tests.sim.providers import World

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example(source: str) -> tuple[dict, list[dict]]:
    """The example InferenceCluster of a source and the InferenceClasses it uses."""
    folder = EXAMPLES / source
    xr = yaml.safe_load((folder / "inferencecluster.yaml").read_text())
    classes = list(yaml.safe_load_all((folder / "inferenceclasses.yaml").read_text()))
    return xr, classes


def provider_configs(source: str) -> list[dict]:
    """The cloud ProviderConfigs an example hands over as required resources (may be none)."""
    path = EXAMPLES / source / "providerconfig.yaml"
    return [d for d in yaml.safe_load_all(path.read_text()) if d] if path.exists() else []


def all_classes(classes: list[dict]) -> dict[str, list[dict]]:
    """Required resources as the Composition's bootstrap requirement hands them over."""
    return {"inference-classes": copy.deepcopy(classes)}


def ready(body: dict) -> dict:
    """An observed copy of a desired body, with a Ready=True condition."""
    out = copy.deepcopy(body)
    out.setdefault("status", {})["conditions"] = [
        {"type": "Ready", "status": "True", "reason": "Available"}
    ]
    return out


def provider_config(xr: dict) -> dict | None:
    """The cloud ProviderConfig GKE and Nebius read, as the credentials name it."""
    source = xr["spec"]["cluster"]["source"]
    group = {"GKE": "gcp.m.upbound.io", "Nebius": "nebius.m.upbound.io"}.get(source)
    if group is None:
        return None
    creds = xr["spec"]["cluster"][source.lower()].get("credentials", {})
    kind = creds.get("type", "ClusterProviderConfig")
    meta = {"name": creds.get("name", "default")}
    if kind == "ProviderConfig":
        meta["namespace"] = "modelplane-system"
    return {
        "apiVersion": f"{group}/v1beta1",
        "kind": kind,
        "metadata": meta,
        "spec": {
            "projectID": "project-e00generated",
            "credentials": {
                "source": "Secret",
                "secretRef": {"namespace": "crossplane-system", "name": "cloud", "key": "creds"},
            },
        },
    }


def world_for(xr: dict) -> World:
    """Every Capacity Block a pool names exists, in the pool's zone."""
    reservations = {
        p["capacityBlock"]["capacityReservationId"]: {
            "availabilityZone": p["zones"][0],
            "instanceType": "p5en.48xlarge",
            "instanceCount": 64,
        }
        for p in xr["spec"].get("nodePools", [])
        if "capacityBlock" in p
    }
    return World(capacity_reservations=reservations)
