"""Validate an example and what the function composes for it against the real schemas, offline.

python -m tests.tools.validate eks-on-demand [--converged]

The example's manifests as a user applies them, and the XR and every resource the function
composes for it (the first reconcile, or with --converged the last one, tests/tools/converged.py),
with the manifests its Objects carry: `crossplane beta validate` against the XRDs in apis/ and the
CRDs in CRDS_DIR (../shared/crds), core kinds against the Kubernetes schema (tests/validation.py,
what the tests run). validate always adds the Crossplane image's own CRDs; a temporary cache holds
them, from CRDS_DIR/crossplane, so nothing is fetched from a registry.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kubernetes_validate
import yaml

from tests.conftest import CROSSPLANE_IMAGE, crds_dir
from tests.tools.converged import converged
from tests.tools.render import crossplane_bin, example_folder, render_args
from tests.tools.server import ROOT, function_server
from tests.validation import validate_everything


def seed_cache(cache: Path) -> None:
    """The cache entry validate reads for CROSSPLANE_IMAGE, holding the core CRDs of CRDS_DIR."""
    image, tag = CROSSPLANE_IMAGE.rsplit(":", 1)
    seeded = cache / f"{image}@{tag}"
    seeded.mkdir(parents=True)
    for crd in (crds_dir() / "crossplane").glob("*.yaml"):
        shutil.copy(crd, seeded / crd.name)


def rendered(target: str, name: str, want_converged: bool, workdir: Path) -> list[dict]:
    """The XR and what is composed for it, at the first reconcile or the converged one."""
    if want_converged:
        out, _ = converged(target, name, workdir / "passes")
    else:
        args = render_args(target, ROOT / "examples" / name, "--include-full-xr")
        proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
        if proc.returncode != 0:
            raise AssertionError(f"crossplane render failed:\n{proc.stderr}")
        out = proc.stdout
    return [d for d in yaml.safe_load_all(out) if d]


def main(argv: list[str]) -> int:
    want_converged = "--converged" in argv
    argv = [a for a in argv if a != "--converged"]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = example_folder(argv[0])
    if folder is None:
        return 2
    manifests = [
        d
        for path in sorted(folder.glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]
    with tempfile.TemporaryDirectory(prefix="validate-") as tmp:
        workdir = Path(tmp)
        seed_cache(workdir / "cache")
        try:
            with function_server() as server:
                docs = rendered(server.target, argv[0], want_converged, workdir)
            count, report = validate_everything(
                crossplane_bin(), workdir / "cache", manifests + docs, workdir
            )
        except (AssertionError, kubernetes_validate.ValidationError) as e:
            print(e, file=sys.stderr)  # a failed render, or what validate found
            return 1
    print(report.strip())
    print(f"{argv[0]}: {count} resources valid (its manifests, the XR, what is composed for it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
