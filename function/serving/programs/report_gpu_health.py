"""The GPU health reporter (function/serving/gpu_health.py), run on the workload cluster by
`python3 -c` in upstream distroless Python (IMAGES["python"]): standard library only, no shell
(registry.k8s.io/kubectl has none to script with: programs/apply_crds.py says why).

Every PERIOD seconds it lists the GPU nodes (NODE_SELECTOR, a page of PAGE at a time, so a
thousand-node cluster never sits in memory whole) and, when the report changed or REFRESH seconds
passed, server-side applies the ConfigMap NAME in NAMESPACE with it under DATA_KEY, stamped
OBSERVED_AT. A failed round is tried again the next period. SIGTERM ends it at once.
"""

import json
import os
import signal
import sys
import time

from function.serving.programs.kube_api import UNANSWERED, Api, ApiError

PAGE = 100


def node_report(node, healthy, pool_label, limit):
    """One node: its name, pool and the watched conditions not as a healthy node has them."""
    meta = node["metadata"]
    bad = [
        {
            "type": c["type"],
            "status": c["status"],
            "reason": c.get("reason") or "",
            "message": (c.get("message") or "")[:limit],
            "since": c.get("lastTransitionTime") or "",
        }
        for c in (node.get("status") or {}).get("conditions") or []
        if healthy.get(c["type"], c["status"]) != c["status"]
    ]
    return {
        "name": meta["name"],
        "pool": (meta.get("labels") or {}).get(pool_label) or "",
        "bad": sorted(bad, key=lambda b: b["type"]),
    }


def report(nodes, many, short):
    """Every node's report, by name; past `many` unhealthy nodes (a fleet-wide incident), messages
    cut to `short` so a thousand nodes fit in a ConfigMap's 1 MiB. Compact JSON, UTF-8."""
    made = sorted(nodes, key=lambda n: n["name"])
    if len([n for n in made if n["bad"]]) > many:
        made = [
            {**n, "bad": [{**b, "message": b["message"][:short]} for b in n["bad"]]} for n in made
        ]
    return json.dumps(made, separators=(",", ":"), ensure_ascii=False)


def gpu_nodes(api, env, healthy):
    """Each GPU node's report, a page of the list at a time."""
    made, token = [], None
    limit = int(env["MESSAGE_LIMIT"])
    while True:
        query = {"labelSelector": env["NODE_SELECTOR"], "limit": str(PAGE)}
        if token:
            query["continue"] = token
        page = api.call("GET", "/api/v1/nodes", query=query)
        made += [node_report(n, healthy, env["POOL_LABEL"], limit) for n in page.get("items") or []]
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return made


def write(api, env, text):
    """The ConfigMap, by server-side apply as its name, stamped now."""
    name, namespace = env["NAME"], env["NAMESPACE"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {env["OBSERVED_AT"]: now},
        },
        "data": {env["DATA_KEY"]: text},
    }
    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    query = {"fieldManager": name, "force": "true"}
    api.call("PATCH", path, json.dumps(body).encode(), "application/apply-patch+yaml", query)


def main(env):
    api, healthy = Api(env), json.loads(env["HEALTHY"])
    many, short = int(env["MANY"]), int(env["SHORT_MESSAGE"])
    period, refresh = int(env["PERIOD"]), int(env["REFRESH"])
    last, wrote = None, 0.0
    while True:
        try:
            text = report(gpu_nodes(api, env, healthy), many, short)
            if text != last or time.monotonic() - wrote >= refresh:
                write(api, env, text)
                last, wrote = text, time.monotonic()
        except (ApiError, *UNANSWERED) as e:  # tried again next period
            print(f"not reported: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        time.sleep(period)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main(os.environ)
