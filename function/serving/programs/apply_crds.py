"""The CRD Job's apply step (function/serving/crd_job.py), run on the workload cluster by
`python3 -c` in upstream distroless Python (IMAGES["python"]): standard library only, no shell.

Why not kubectl: registry.k8s.io/kubectl is built on distroless static since Kubernetes moved its
images' base there (kubernetes build/common.sh, KUBE_GORUNNER_IMAGE
gcr.io/distroless/static-debian13), so it has no shell and no jq to script with (kyverno#13899,
openstudio-server-helm#97 on v1.34.9).

It reads the OCI layout oras wrote under $WORK/chart, takes the chart layer (HELM_LAYER), checks
each file CHECKSUMS names against its pinned sha256, takes over from Helm's field manager the CRDs
Helm wrote (HELM_MANAGERS; Kubernetes' server-side apply docs, "Transferring ownership"),
applies every document of the checked files by server-side apply as MANAGER, forcing conflicts,
and waits until each CRD in CRDS is Established. It talks to the API server as the pod's service
account (its projected token and CA, KUBERNETES_SERVICE_HOST and _PORT). Every failure exits
non-zero with what failed, for the pod's log and the Job's retries.
"""

import hashlib
import json
import os
import re
import signal
import sys
import tarfile
import time

from function.serving.programs.kube_api import UNANSWERED, Api, ApiError

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"


def chart_files(work, layer_type, checksums):
    """The files CHECKSUMS names, from the chart layer of the layout, each checked."""
    layout = f"{work}/chart"

    def blob(digest):
        return f"{layout}/blobs/{digest.replace(':', '/', 1)}"

    with open(f"{layout}/index.json") as f:
        manifest = json.load(f)["manifests"][0]["digest"]
    with open(blob(manifest)) as f:
        layers = [layer for layer in json.load(f)["layers"] if layer["mediaType"] == layer_type]
    if not layers:
        sys.exit(f"no layer of type {layer_type} in the chart's manifest {manifest}")
    files = []
    with tarfile.open(blob(layers[0]["digest"]), "r:gz") as chart:
        for line in checksums.splitlines():
            pinned, path = line.split(None, 1)
            member = chart.extractfile(path) if path in chart.getnames() else None
            if member is None:
                sys.exit(f"{path}: FAILED, not in the chart")
            data = member.read()
            if hashlib.sha256(data).hexdigest() != pinned:
                sys.exit(f"{path}: FAILED, its sha256 is not the pinned {pinned}")
            print(f"{path}: OK", flush=True)
            files.append(data.decode())
    return files


def documents(text):
    """Each YAML document of a file with its metadata.name (a CRD file as charts ship them:
    `metadata:` at the start of a line, its keys indented under it)."""
    for doc in re.split(r"^---[^\n]*\n", text, flags=re.M):
        meta = re.search(r"^metadata:[ \t]*\n((?:[ \t]+\S.*\n?|[ \t]*\n)*)", doc, re.M)
        if meta is None:
            if re.search(r"^[^#\s]", doc, re.M):
                sys.exit(f"a document without metadata: {doc[:200]!r}")
            continue  # empty, or comments only
        indent = re.match(r"[ \t]*", meta.group(1)).group(0)
        name = re.search(rf"^{indent}name:[ \t]*['\"]?([^'\"\s#]+)", meta.group(1), re.M)
        if name is None:
            sys.exit(f"a document without metadata.name: {doc[:200]!r}")
        yield name.group(1), doc


def by_helm(entry, helm):
    return entry.get("manager") in helm and not entry.get("subresource")


def take_over(api, name, manager, helm):
    """The CRD's fields from Helm's field manager to manager: the live content applied as
    manager (nothing changes), then Helm's entries dropped by a JSON patch that first tests the
    resourceVersion the apply returned. Other managers' entries stay. Once: a CRD without a Helm
    entry is left alone."""
    live = api.call("GET", f"{CRD_PATH}/{name}")
    if live is None or not any(by_helm(e, helm) for e in live["metadata"].get("managedFields", [])):
        return
    meta = {
        k: live["metadata"][k] for k in ("name", "labels", "annotations") if k in live["metadata"]
    }
    content = {"apiVersion": live["apiVersion"], "kind": live["kind"], "metadata": meta}
    content["spec"] = live["spec"]
    query = {"fieldManager": manager}
    forced = {**query, "force": "true"}
    taken = api.call("PATCH", f"{CRD_PATH}/{name}", json.dumps(content).encode(), APPLY, forced)
    kept = [e for e in taken["metadata"]["managedFields"] if not by_helm(e, helm)]
    patch = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": taken["metadata"]["resourceVersion"],
        },
        {"op": "replace", "path": "/metadata/managedFields", "value": kept},
    ]
    api.call("PATCH", f"{CRD_PATH}/{name}", json.dumps(patch).encode(), JSON_PATCH, query)
    print(f"customresourcedefinition/{name} taken over from {sorted(helm)}", flush=True)


def established(crd):
    conditions = (crd or {}).get("status", {}).get("conditions", [])
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def main(env):
    api = Api(env)
    manager, helm = env["MANAGER"], set(env["HELM_MANAGERS"].split())
    crds = env["CRDS"].split()
    docs = [
        d
        for text in chart_files(env["WORK"], env["HELM_LAYER"], env["CHECKSUMS"])
        for d in documents(text)
    ]
    if sorted(name for name, _ in docs) != sorted(crds):
        sys.exit(
            f"the checked files hold {sorted(n for n, _ in docs)}, not the pinned {sorted(crds)}"
        )
    for name in crds:
        take_over(api, name, manager, helm)
    query = {"fieldManager": manager, "force": "true"}
    for name, doc in docs:
        api.call("PATCH", f"{CRD_PATH}/{name}", doc.encode(), APPLY, query)
        print(f"customresourcedefinition/{name} serverside-applied", flush=True)
    deadline = time.monotonic() + int(env["WAIT_TIMEOUT"])
    waiting = list(crds)
    while waiting:
        waiting = [n for n in waiting if not established(api.call("GET", f"{CRD_PATH}/{n}"))]
        if waiting and time.monotonic() > deadline:
            sys.exit(f"not Established after {env['WAIT_TIMEOUT']} s: {waiting}")
        if waiting:
            time.sleep(2)
    print(f"Established: {' '.join(crds)}", flush=True)


if __name__ == "__main__":
    # PID 1 gets SIGTERM only with a handler: a drain or a deleted Job ends the pod at once.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        main(os.environ)
    except (ApiError, *UNANSWERED) as e:  # refused, or no answer: the Job's retries
        sys.exit(f"{type(e).__name__}: {e}")
