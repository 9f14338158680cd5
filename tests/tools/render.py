"""Render a bundled example with the real `crossplane render` against the running function.

python -m tests.tools.render existing [-- extra crossplane render flags]
"""

import os
import subprocess
import sys
from pathlib import Path

from tests.tools.server import ROOT, function_server

COMPOSITION = ROOT / "compositions" / "inferenceclusters.yaml"
FUNCTIONS = ROOT / "examples" / "functions.yaml"


def crossplane_bin() -> str:
    return os.environ.get("CROSSPLANE") or str(ROOT / ".tools" / "bin" / "crossplane")


def required_files(example: Path) -> list[Path]:
    """What an example hands over as required resources: its classes, and the cloud
    ProviderConfig it authenticates with when the function must read it (GKE's project)."""
    files = [example / "inferenceclasses.yaml", example / "providerconfig.yaml"]
    return [f for f in files if f.exists()]


def render_args(
    target: str, example: Path, *extra: str, composition: Path = COMPOSITION
) -> list[str]:
    """The crossplane render command line for one example directory."""
    args = [
        crossplane_bin(),
        "render",
        str(example / "inferencecluster.yaml"),
        str(composition),
        str(FUNCTIONS),
        *(f"--required-resources={path}" for path in required_files(example)),
        f"--xrd={ROOT / 'apis' / 'inferenceclusters' / 'definition.yaml'}",
        "--include-function-results",
        f"--function-annotations=render.crossplane.io/runtime-development-target={target}",
    ]
    observed = example / "observed.yaml"
    if observed.exists():
        args.append(f"--observed-resources={observed}")
    return [*args, *extra]


def example_folder(name: str) -> Path | None:
    """A bundled example's folder, or None, said on stderr (the tools' shared first check)."""
    folder = ROOT / "examples" / name
    if (folder / "inferencecluster.yaml").is_file():
        return folder
    print(f"no example {name!r} under examples/", file=sys.stderr)
    return None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    example = example_folder(argv[0])
    if example is None:
        return 2
    with function_server() as server:
        return subprocess.run(
            render_args(server.target, example, *argv[1:]), check=False
        ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
