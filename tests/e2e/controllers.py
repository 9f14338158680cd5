"""The one simulated step on the workload side: the work of processes kwok cannot run.

kwok runs no containers, so the controllers the charts install are pods that are Running and Ready
but do nothing. `StandIns` does, every second, exactly this and nothing else (docs/testing.md lists it),
each piece only once the real thing it stands for is in place (its Deployment Available, its
DaemonSet's pod Ready on the node), so an install that fails shows:

- the cloud's node pools: a kwok node per GPU pool node the function composed (from the composed
  pools' own fields, tests/nodes.py), once the pool is Ready; for Existing, the GPU nodes docs/clouds/existing.md
  asks the operator to prepare; each with the class's GPUs, once the XR reports them; on Vultr,
  the `nvidia` RuntimeClass the GPU Operator VKE installs creates;
- NFD's worker and master: the node labels tests/nodes.py derives from the nfd-worker.conf the
  release installed and from the NodeFeatureRules (pci.device `In` terms only), on a GPU node
  whose worker pod is Ready;
- the NVIDIA DRA kubelet plugin: a ResourceSlice of the node's GPUs (driver gpu.nvidia.com, the
  class's count, named as the plugin names it), on a GPU node whose plugin pod is Ready; the real
  kube-scheduler allocates the GPU probes' admin-access claims from it (kwok then runs the pods,
  so the plugin's prepare step and nvidia-smi stay unproved here);
- cert-manager (its controller Available): a Certificate's Secret (a key and certificate for its
  names, signed by the workload cluster's test CA) and its Ready condition;
- trust-manager (Available): a Bundle's target ConfigMaps (from the Secrets in its trust
  namespace) and its Synced condition;
- Envoy Gateway (Available): a Gateway's address and Accepted/Programmed conditions, and the
  Accepted ancestor status of a ClientTrafficPolicy;
- NVIDIA's network operator (Available): a NicClusterPolicy's `state: ready`;
- the GPU health reporter (its Deployment Available): the Deployment's own command and
  environment, run here as a process with this host's Python for the image's, as the reporter's service
  account (a token from the API server's TokenRequest, so its RBAC is what allows it), five
  seconds apart instead of a minute.
"""

from __future__ import annotations

import base64
import datetime
import os
import sys
import urllib.parse
from collections.abc import Callable

import yaml

from function.serving import crd_job, gpu_health, gpu_metrics
from function.versions import CHARTS
from tests import nodes
from tests.charts import chart_path
from tests.e2e.controlplane import Process
from tests.e2e.kube import ApiError, Kube, Ticker, condition
from tests.e2e.workload import WorkloadCluster
from tests.sim import workload as sim_workload

MANAGER = "e2e-stand-ins"
GPU_DRIVER = "gpu.nvidia.com"
# Pool kinds tests/nodes.py reads, by group and kind, and the launch templates EKS pools name.
POOL_KINDS = {
    ("container.gcp.m.upbound.io", "NodePool"),
    ("eks.aws.m.upbound.io", "NodeGroup"),
    ("ec2.aws.m.upbound.io", "LaunchTemplate"),
    ("mk8s.nebius.m.upbound.io", "NodeGroup"),
    ("containerservice.azure.m.upbound.io", "KubernetesClusterNodePool"),
    ("vke.vultr.m.upbound.io", "KubernetesNodePool"),
}
SYSTEM_NODE = "system-0"
SYSTEM_LABELS = {"modelplane.ai/pool": "system", "node.kubernetes.io/instance-type": "system"}
SYSTEM_ALLOCATABLE = {"cpu": "32", "memory": "128Gi", "pods": "250", "ephemeral-storage": "500Gi"}
GPU_ALLOCATABLE = {"cpu": "96", "memory": "1000Gi", "pods": "110", "ephemeral-storage": "2Ti"}
CONTROLLERS = {  # the app.kubernetes.io/name of the Deployment each stand-in waits for
    "cert-manager": "cert-manager",
    "trust-manager": "trust-manager",
    "envoy-gateway": "gateway-helm",
    "network-operator": "network-operator",
}
NFD_WORKER = "node-feature-discovery-worker"  # the DaemonSet's name ends so (NFD chart 0.18.3)
DRA_PLUGIN = "nvidia-dra-driver-gpu-kubelet-plugin"
ENVOY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def true(type_: str, reason: str) -> dict:
    """A metav1.Condition (every field its schema requires)."""
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": f"{reason} (stood in for by tests/e2e/controllers.py)",
        "lastTransitionTime": now(),
    }


def typed(kube: Kube, api_version: str, kind: str, namespace: str | None = None) -> list[dict]:
    """A list's items with their apiVersion and kind (a list names them once, not per item)."""
    return [
        {"apiVersion": api_version, "kind": kind, **item}
        for item in kube.list(api_version, kind, namespace)
    ]


def pod_ready(pod: dict) -> bool:
    return condition(pod, "Ready").get("status") == "True"


class StandIns:
    """See the module docstring: the XR (`xr()` reads it) composed into `namespace` of the
    management cluster, installed into `cluster`."""

    def __init__(
        self,
        management: Kube,
        namespace: str,
        cluster: WorkloadCluster,
        xr: Callable[[], dict | None],
        interval: float = 1.0,
    ):
        self.management, self.namespace, self.cluster, self.xr = management, namespace, cluster, xr
        assert cluster.kube is not None
        self.kube: Kube = cluster.kube
        self.errors: list[str] = []
        self.done: set[str] = set()  # what was written, as "<step>/<name>", for the report
        self.gpu_nodes: dict[str, int] = {}  # node name -> its GPUs
        self.reporter: Process | None = None  # the GPU health reporter's script, once started
        self._ticker = Ticker("stand-ins", self.tick, interval, self._close)

    # --- the loop ---------------------------------------------------------------------------------

    def __enter__(self) -> StandIns:
        self.cluster.add_node(SYSTEM_NODE, SYSTEM_LABELS, [], SYSTEM_ALLOCATABLE)
        self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._ticker.stop()

    def _close(self) -> None:
        self.kube.close()
        self.management.close()

    def tick(self) -> None:
        for step in (
            self.node_pools,
            self.crd_jobs,
            self.nfd,
            self.dra,
            self.cert_manager,
            self.trust_manager,
            self.envoy_gateway,
            self.network_operator,
            self.gpu_health,
        ):
            try:
                step()
            except (ApiError, LookupError, OSError, KeyError, ValueError) as e:
                if len(self.errors) < 200:
                    self.errors.append(f"{step.__name__}: {e!r}")

    def report(self) -> str:
        return f"stand-ins: {sorted(self.done)}\n" + "\n".join(
            f"  error: {e}" for e in self.errors[-10:]
        )

    # --- helpers ----------------------------------------------------------------------------------

    def available(self, controller: str) -> bool:
        """Whether the chart's Deployment of this controller is Available in the workload cluster."""
        return bool(self.deployments(controller))

    def deployments(self, controller: str) -> list[dict]:
        """The chart's Available Deployments of this controller in the workload cluster."""
        name = CONTROLLERS[controller]
        return [
            d
            for d in self.kube.list("apps/v1", "Deployment")
            if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == name
            and condition(d, "Available").get("status") == "True"
        ]

    def pods_ready_on(self, daemonset_suffix: str) -> set[str]:
        """The nodes where a pod of the DaemonSet (by its name's end) is Ready."""
        return {
            p["spec"]["nodeName"]
            for p in self.kube.list("v1", "Pod")
            if any(
                o["kind"] == "DaemonSet" and o["name"].endswith(daemonset_suffix)
                for o in p["metadata"].get("ownerReferences") or []
            )
            and p["spec"].get("nodeName")
            and pod_ready(p)
        }

    def list_or_empty(self, api_version: str, kind: str) -> list[dict]:
        """A kind the charts install: nothing until its CRD is there."""
        try:
            return typed(self.kube, api_version, kind)
        except LookupError:
            return []

    def status(self, obj: dict, status: dict) -> None:
        meta = obj["metadata"]
        self.kube.patch(
            obj["apiVersion"],
            obj["kind"],
            meta["name"],
            {"status": status},
            namespace=meta.get("namespace"),
            subresource="status",
            manager=MANAGER,
        )

    # --- the cloud's node pools -------------------------------------------------------------------

    def pools(self) -> tuple[list[nodes.Node], dict]:
        """The GPU nodes the composed pools create (those Ready), and the XR."""
        xr = self.xr() or {}
        if "existing" in xr.get("spec", {}).get("cluster", {}):
            return nodes.existing_gpu_nodes(xr), xr
        docs = []
        for crd in self.management.list("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
            spec = crd["spec"]
            if (spec["group"], spec["names"]["kind"]) not in POOL_KINDS:
                continue
            version = next(v["name"] for v in spec["versions"] if v.get("storage"))
            api = f"{spec['group']}/{version}"
            for doc in typed(self.management, api, spec["names"]["kind"], self.namespace):
                owner = (doc["metadata"].get("labels") or {}).get("crossplane.io/composite")
                if owner != xr.get("metadata", {}).get("name"):
                    continue  # another XR's pool, on another workload cluster
                if (
                    doc["kind"] == "LaunchTemplate"
                    or condition(doc, "Ready").get("status") == "True"
                ):
                    docs.append(doc)
        return nodes.gpu_nodes(docs), xr

    def node_pools(self) -> None:
        gpu, xr = self.pools()
        if gpu and "vultr" in xr.get("spec", {}).get("cluster", {}):
            self.vke_runtime_class()
        spec_pools = {p["name"]: p for p in xr.get("spec", {}).get("nodePools") or []}
        status_pools = {p["name"]: p for p in xr.get("status", {}).get("gpuPools") or []}
        for node in gpu:
            count = min(int(spec_pools.get(node.pool, {}).get("nodeCount") or 1), 2)
            gpus = sum(
                int(d.get("count", 1))
                for d in status_pools.get(node.pool, {}).get("devices") or []
                if d.get("driver") == GPU_DRIVER
            )
            if not gpus:
                continue  # the class is not resolved yet: the cloud's node would have them
            for i in range(count):
                name = f"{node.pool}-{i}"
                if name in self.gpu_nodes:
                    continue
                allocatable = {**GPU_ALLOCATABLE, "nvidia.com/gpu": str(gpus)}
                self.cluster.add_node(name, node.labels, node.taints, allocatable)
                self.gpu_nodes[name] = gpus
                self.done.add(f"node/{name}")

    def vke_runtime_class(self) -> None:
        """The RuntimeClass the GPU Operator VKE installs on GPU pools creates (its ClusterPolicy's
        operator.runtimeClass, `nvidia` by default), which the DCGM exporter runs under there."""
        if "vke/runtime-class" in self.done:
            return
        self.kube.apply(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": gpu_metrics.VULTR_RUNTIME_CLASS},
                "handler": gpu_metrics.VULTR_RUNTIME_CLASS,
            },
            manager=MANAGER,
        )
        self.done.add("vke/runtime-class")

    def nfd(self) -> None:
        configs = [
            c
            for c in typed(self.kube, "v1", "ConfigMap")
            if "nfd-worker.conf" in (c.get("data") or {})
        ]
        if not configs:
            return
        labels = nodes.nfd_labels(nodes.nfd_worker_config(configs), [nodes.NVIDIA_GPU])
        rules = self.list_or_empty("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule")
        labels |= nodes.rule_labels(rules, [nodes.NVIDIA_GPU])
        for name in self.pods_ready_on(NFD_WORKER) & set(self.gpu_nodes):
            node = self.kube.get("v1", "Node", name)
            if labels.items() <= (node["metadata"].get("labels") or {}).items():
                continue
            self.kube.patch("v1", "Node", name, {"metadata": {"labels": labels}}, manager=MANAGER)
            self.done.add(f"nfd/{name}")

    def dra(self) -> None:
        published = {
            s["spec"].get("nodeName")
            for s in self.kube.list("resource.k8s.io/v1", "ResourceSlice")
            if s["spec"].get("driver") == GPU_DRIVER
        }
        for name in self.pods_ready_on(DRA_PLUGIN) & set(self.gpu_nodes) - published:
            node = self.kube.get("v1", "Node", name)
            count = self.gpu_nodes[name]
            self.kube.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {
                        # As the plugin's slice controller names them
                        # (k8s.io/dynamic-resource-allocation/resourceslice: <node>-<driver>-).
                        "generateName": f"{name}-{GPU_DRIVER}-",
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": name,
                                "uid": node["metadata"]["uid"],
                            }
                        ],
                    },
                    "spec": {
                        "driver": GPU_DRIVER,
                        "nodeName": name,
                        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                        "devices": [
                            {
                                "name": f"gpu-{i}",
                                "attributes": {
                                    "type": {"string": "gpu"},
                                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                                },
                            }
                            for i in range(count)
                        ],
                    },
                }
            )
            self.done.add(f"dra/{name}")

    # --- controllers' status ----------------------------------------------------------------------

    def cert_manager(self) -> None:
        if not self.available("cert-manager"):
            return
        for cert in self.list_or_empty("cert-manager.io/v1", "Certificate"):
            if condition(cert, "Ready").get("status") == "True":
                continue
            meta, spec = cert["metadata"], cert["spec"]
            folder = self.cluster.pki.issue(
                f"certificates/{meta['namespace']}/{meta['name']}",
                spec.get("commonName") or meta["name"],
                server=True,
                dns=spec.get("dnsNames") or (),
            )
            data = {
                key: base64.b64encode((folder / key).read_bytes()).decode()
                for key in ("tls.crt", "tls.key", "ca.crt")
            }
            if spec.get("isCA"):  # a CA certificate is its own ca.crt
                data["ca.crt"] = data["tls.crt"]
            self.kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "kubernetes.io/tls",
                    "metadata": {"name": spec["secretName"], "namespace": meta["namespace"]},
                    "data": data,
                },
                manager=MANAGER,
            )
            self.status(cert, {"conditions": [true("Ready", "Ready")], "revision": 1})
            self.done.add(f"cert-manager/{meta['name']}")

    def trust_manager(self) -> None:
        """Each Bundle, from the Secrets in the namespace trust-manager reads sources in (its
        Deployment's --trust-namespace; the binary's default is cert-manager)."""
        running = self.deployments("trust-manager")
        if not running:
            return
        args = [
            a
            for c in running[0]["spec"]["template"]["spec"]["containers"]
            for a in c.get("args") or []
        ]
        trust = next(
            (a.split("=", 1)[1] for a in args if a.startswith("--trust-namespace=")), "cert-manager"
        )
        for bundle in self.list_or_empty("trust.cert-manager.io/v1alpha1", "Bundle"):
            if condition(bundle, "Synced").get("status") == "True":
                continue
            spec = bundle["spec"]
            pem = ""
            for source in spec.get("sources") or []:
                ref = source.get("secret")
                if ref:
                    secrets = [
                        s
                        for s in self.kube.list("v1", "Secret", trust)
                        if s["metadata"]["name"] == ref["name"] and ref["key"] in s.get("data", {})
                    ]
                    if not secrets:
                        return  # not issued yet
                    pem += base64.b64decode(secrets[0]["data"][ref["key"]]).decode()
            key = spec["target"]["configMap"]["key"]
            wanted = (spec["target"].get("namespaceSelector") or {}).get("matchLabels") or {}
            for ns in self.kube.list("v1", "Namespace"):
                if wanted.items() <= (ns["metadata"].get("labels") or {}).items():
                    self.kube.apply(
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {
                                "name": bundle["metadata"]["name"],
                                "namespace": ns["metadata"]["name"],
                            },
                            "data": {key: pem},
                        },
                        manager=MANAGER,
                    )
            self.status(bundle, {"conditions": [true("Synced", "Synced")]})
            self.done.add(f"trust-manager/{bundle['metadata']['name']}")

    def crd_jobs(self) -> None:
        """What a CRD Job's containers do (function/serving/crd_job.py), which kwok never runs (it
        completes the pod): each chart file its apply container's CHECKSUMS name, read from the
        chart in ../shared/charts, applied by server-side apply under the Job's field manager.
        The containers' own commands run as processes in tests/e2e/test_crd_job.py."""
        jobs = self.kube.list("batch/v1", "Job", label_selector="app.kubernetes.io/name=mp-crds")
        for job in jobs:
            name = job["metadata"]["name"]
            if f"crd-job/{name}" in self.done:
                continue
            chart = CHARTS[job["metadata"]["labels"]["modelplane.ai/chart"]]
            root = chart_path(chart.name, chart.version) or chart_path(
                chart.name, f"v{chart.version}"
            )
            if root is None:
                raise LookupError(f"no chart {chart.name} {chart.version} for the Job {name}")
            env = {
                e["name"]: e.get("value", "")
                for c in job["spec"]["template"]["spec"]["containers"]
                for e in c.get("env", [])
            }
            for line in env.get("CHECKSUMS", "").splitlines():
                path = line.split(None, 1)[1].split("/", 1)[1]  # inside the chart's folder
                for doc in yaml.safe_load_all((root / path).read_text()):
                    if doc:
                        self.kube.apply(doc, manager=crd_job.MANAGER)
            self.done.add(f"crd-job/{name}")

    def envoy_gateway(self) -> None:
        if not self.available("envoy-gateway"):
            return
        for gateway in self.list_or_empty("gateway.networking.k8s.io/v1", "Gateway"):
            if (gateway.get("status") or {}).get("addresses"):
                continue
            address = sim_workload.GATEWAY_ADDRESS
            self.status(
                gateway,
                {
                    "addresses": [{"type": "IPAddress", "value": address}],
                    "conditions": [true("Accepted", "Accepted"), true("Programmed", "Programmed")],
                },
            )
            self.done.add(f"envoy-gateway/{gateway['metadata']['name']}")
        for policy in self.list_or_empty("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy"):
            if (policy.get("status") or {}).get("ancestors"):
                continue
            meta = policy["metadata"]
            ancestors = [
                {
                    "ancestorRef": {
                        "group": ref["group"],
                        "kind": ref["kind"],
                        "name": ref["name"],
                        "namespace": meta["namespace"],
                        **({"sectionName": ref["sectionName"]} if ref.get("sectionName") else {}),
                    },
                    "controllerName": ENVOY_CONTROLLER,
                    "conditions": [true("Accepted", "Accepted")],
                }
                for ref in policy["spec"].get("targetRefs") or []
            ]
            self.status(policy, {"ancestors": ancestors})
            self.done.add(f"envoy-gateway/{meta['name']}")

    def network_operator(self) -> None:
        if not self.available("network-operator"):
            return
        for policy in self.list_or_empty("mellanox.com/v1alpha1", "NicClusterPolicy"):
            if (policy.get("status") or {}).get("state") != "ready":
                self.status(policy, {"state": "ready"})
                self.done.add(f"network-operator/{policy['metadata']['name']}")

    def gpu_health(self) -> None:
        if self.reporter is not None:
            return
        namespace = gpu_health.NAMESPACE
        deployment = self.kube.get_or_none("apps/v1", "Deployment", gpu_health.NAME, namespace)
        if deployment is None or condition(deployment, "Available").get("status") != "True":
            return
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        asked = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{gpu_health.NAME}/token"
        token = self.kube.request("POST", path, asked)["status"]["token"]
        # What the kubelet projects (the account's token and the cluster's CA) and the
        # environment it gives the pod for the API server; this host's Python for the image's.
        account = self.cluster.workdir / "gpu-health-reporter" / "serviceaccount"
        account.mkdir(parents=True, exist_ok=True)
        (account / "token").write_text(token)
        (account / "ca.crt").write_bytes(self.cluster.pki.ca_file.read_bytes())
        address = urllib.parse.urlsplit(self.cluster.server)
        env = {e["name"]: e["value"] for e in container.get("env") or []}
        env |= {
            "PERIOD": "5",
            "KUBERNETES_SERVICE_HOST": address.hostname or "",
            "KUBERNETES_SERVICE_PORT": str(address.port),
            "SERVICE_ACCOUNT_DIR": str(account),
            "PATH": os.environ.get("PATH", ""),
        }
        command = [sys.executable, *container["command"][1:]]
        assert container["command"][0] == "/usr/bin/python3", container["command"][:2]
        self.reporter = self.cluster.spawn("gpu-health-reporter", command, env)
        self.done.add("gpu-health/reporter")
