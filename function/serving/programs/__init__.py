"""Programs the function runs on a workload cluster by `python3 -c` in upstream distroless Python
(IMAGES["python"]): standard library only. Each is composed as kube_api.py's text followed by
its own (`source`), so it runs alone in the pod; the tests import and run them for real."""

from pathlib import Path

HERE = Path(__file__).parent
IMPORT_API = "from function.serving.programs.kube_api import "


def source(name: str) -> str:
    """The text `python3 -c` runs: the API client, then the program without its import of it."""
    lines = (HERE / f"{name}.py").read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(IMPORT_API)]
    if len(kept) != len(lines) - 1:
        raise ValueError(f"{name}.py does not import the API client once as {IMPORT_API!r}")
    return (HERE / "kube_api.py").read_text() + "\n\n" + "".join(kept)
