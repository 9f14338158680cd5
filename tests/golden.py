"""Golden files: reviewed YAML of rendered output, so every change to it is visible in a diff.

Regenerate deliberately, then review the diff:  UPDATE_GOLDEN=1 make test
"""

import os
from pathlib import Path

import yaml

GOLDEN = Path(__file__).resolve().parent / "golden"


def check_golden(name: str, docs: list[dict]) -> None:
    text = yaml.safe_dump_all(docs, sort_keys=True)
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} differs from {path}; UPDATE_GOLDEN=1 to accept"
