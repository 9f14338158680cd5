"""Small builders for test inputs: the bundled examples, loaded as dicts, and observed resources."""

import copy
from pathlib import Path

import yaml

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
