"""The workload cluster of tests/e2e: the cluster a cloud (or the operator, for Existing) hands the
function's ClusterProviderConfigs, real except for its kubelets.

It runs, each on a free 127.0.0.1 port and stopped by PID like the control plane:

1. kube-apiserver v1.35 (the same build as the management cluster's) on the management etcd under
   its own prefix (`--etcd-prefix`), with its own CA, token and service-account keys;
2. kube-controller-manager with its default controllers (Deployments, ReplicaSets, DaemonSets,
   Jobs, service accounts, the garbage collector, node lifecycle), and kube-scheduler;
3. kwok v0.8.0 (`make e2e-tools`, tests/tools/kwok) as the kubelet of every node annotated
   `kwok.x-k8s.io/node: fake`, with kwok's own "fast" stages (node-initialize, lease heartbeats,
   pod-ready, pod-complete, pod-delete) read from that module: a scheduled pod becomes Running and
   Ready, a Job's pods complete, so DaemonSets, Deployments and Jobs report real status.

Admission webhooks: the charts install validating and mutating webhook configurations (cert-manager,
Envoy Gateway, KAI, Grove...) whose servers are pods kwok only pretends to run, so this API server
runs without the ValidatingAdmissionWebhook and MutatingAdmissionWebhook admission plugins: the
configurations are created (and provider-helm's `wait` sees them) but never called. Every other
admission plugin of the default set runs (ServiceAccount, ResourceQuota, Priority, DefaultTolerations,
ValidatingAdmissionPolicy...). A CRD's conversion webhook is not an admission plugin: the charts'
CRDs serve one version each, so none is ever called.

`python -m tests.e2e.workload` brings one up (with its own etcd) for a look around.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.e2e.controlplane import (
    LOCALHOST,
    ROOT,
    ControlPlane,
    Supervisor,
    bin_dir,
    free_port,
    kubeconfig_text,
    module_dir,
    required_version,
)
from tests.e2e.kube import ApiError, condition, wait_for

KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_TOOLS = ROOT / "tests" / "tools" / "kwok"
KWOK_NODE = {"kwok.x-k8s.io/node": "fake"}  # the annotation kwok manages nodes by
# kwok's "fast" stages (kwokctl's defaults, kustomize/stage in the module) with lease heartbeats.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl")
POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
# The chart-installed webhooks no pod serves here (see the module docstring).
WEBHOOK_PLUGINS = "ValidatingAdmissionWebhook,MutatingAdmissionWebhook"


def kwok_stages() -> list[dict]:
    """kwok's fast stages from the pinned module."""
    version = required_version(KWOK_TOOLS / "go.mod", KWOK_MODULE)
    folder = module_dir(KWOK_MODULE, version, KWOK_TOOLS)
    return [yaml.safe_load((folder / stage).read_text()) for stage in KWOK_STAGES]


@dataclass
class Ports:
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    scheduler: int = field(default_factory=free_port)
    kwok: int = field(default_factory=free_port)


class WorkloadCluster(Supervisor):
    """kube-apiserver + kube-controller-manager + kube-scheduler + kwok on an etcd prefix.

    `kube` is its cluster-admin client; `kubeconfig_text()` is what the simulated cloud publishes
    as the cluster's connection Secret (the token is cluster-admin, as a cloud's admin kubeconfig)."""

    def __init__(
        self,
        workdir: Path,
        etcd: str,
        prefix: str = "/workload",
        *,
        pod_security: str | None = None,
    ):
        """pod_security: the level Pod Security admission enforces on every namespace that does
        not say otherwise (None: the API server's default, privileged)."""
        super().__init__(workdir)
        self.pod_security = pod_security
        self.etcd, self.prefix = etcd, prefix
        self.ports = Ports()
        self.token = secrets.token_hex(16)
        # What the simulated cloud IAM issues for the cluster's service account (GKE's
        # GoogleApplicationCredentials identity): a bearer token this API server knows.
        self.identity_token = f"ya29.e2e-{secrets.token_hex(16)}"
        self.kubeconfig = self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{LOCALHOST}:{self.ports.apiserver}"

    def kubeconfig_text(self, *, token: bool = True) -> str:
        """The admin kubeconfig; without its token for a cloud whose clients authenticate through
        an identity (GKE: the kubeconfig carries the endpoint and CA only)."""
        return kubeconfig_text(self.server, self.pki, self.token if token else None, "workload")

    def start(self) -> WorkloadCluster:
        def steps():
            bins = {name: bin_dir() / name for name in BINARIES}
            missing = [str(p) for p in bins.values() if not p.is_file()]
            if missing:
                raise FileNotFoundError(f"not built: {missing}; run `make e2e-tools`")
            self._pki()
            yield "kube-apiserver", lambda: self._apiserver(bins["kube-apiserver"])
            yield "kube-controller-manager", lambda: self._cm(bins["kube-controller-manager"])
            yield "kube-scheduler", lambda: self._scheduler(bins["kube-scheduler"])
            yield "kwok", lambda: self._kwok(bins["kwok"])

        self.run_steps(steps)
        return self

    def _pki(self) -> None:
        pki = self.api_pki(
            self.server,
            ips=[LOCALHOST, SERVICE_CIDR.replace("0/16", "1")],
            dns=["localhost", "kubernetes.default.svc"],
            # identity_token: the simulated cloud IAM's token for the cluster's service account.
            users=[(self.token, "admin"), (self.identity_token, "cloud-service-account")],
        )
        self.component_certs = pki.issue("components", "workload", server=True, ips=[LOCALHOST])

    def _apiserver(self, binary: Path) -> None:
        self.run_apiserver(
            binary,
            etcd=self.etcd,
            port=self.ports.apiserver,
            extra=[
                f"--etcd-prefix={self.prefix}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--disable-admission-plugins={WEBHOOK_PLUGINS}",
                # Privileged containers (the DRA kubelet plugin, NFD's worker...), as every cloud's
                # clusters allow (kubeadm sets it too); the API server's default refuses them.
                "--allow-privileged=true",
                *self._admission_config(),
            ],
        )

    def _admission_config(self) -> list[str]:
        """A hardened cluster's Pod Security defaults, as Talos ships them (its
        AdmissionConfiguration: enforce the level, audit and warn restricted, kube-system
        exempt): a namespace that does not label itself gets the level."""
        if self.pod_security is None:
            return []
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {
                    "name": "PodSecurity",
                    "configuration": {
                        "apiVersion": "pod-security.admission.config.k8s.io/v1",
                        "kind": "PodSecurityConfiguration",
                        "defaults": {
                            "enforce": self.pod_security,
                            "enforce-version": "latest",
                            "audit": "restricted",
                            "audit-version": "latest",
                            "warn": "restricted",
                            "warn-version": "latest",
                        },
                        "exemptions": {
                            "usernames": [],
                            "runtimeClasses": [],
                            "namespaces": ["kube-system"],
                        },
                    },
                }
            ],
        }
        path = self.workdir / "admission.json"
        path.write_text(json.dumps(config))
        return [f"--admission-control-config-file={path}"]

    def _cm(self, binary: Path) -> None:
        self.run_kube_component(
            binary,
            self.ports.controller_manager,
            self.component_certs,
            [
                "--controllers=*",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={self.sa_key}",
                f"--root-ca-file={self.pki.ca_file}",
                f"--cluster-cidr={POD_CIDR}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
        )

    def _scheduler(self, binary: Path) -> None:
        self.run_kube_component(
            binary,
            self.ports.scheduler,
            self.component_certs,
            [
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
            ],
        )

    def _kwok(self, binary: Path) -> None:
        config = self.workdir / "kwok.yaml"
        config.write_text(yaml.safe_dump_all(kwok_stages()))
        proc = self.spawn(
            "kwok",
            [
                str(binary),
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
                "--manage-nodes-with-annotation-selector="
                + ",".join(f"{k}={v}" for k, v in KWOK_NODE.items()),
                f"--cidr={POD_CIDR}",
                f"--node-ip={LOCALHOST}",
                "--node-lease-duration-seconds=40",
                f"--server-address={LOCALHOST}:{self.ports.kwok}",
            ],
        )

        def healthy() -> bool:
            url = f"http://{LOCALHOST}:{self.ports.kwok}/healthz"
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
                return r.status == 200

        self.wait_ready(proc, healthy, 60, "/healthz")

    # --- nodes ------------------------------------------------------------------------------------

    def add_node(self, name: str, labels: dict, taints: list[dict], allocatable: dict) -> dict:
        """A node kwok plays, with the given labels, taints and allocatable (its capacity)."""
        assert self.kube is not None
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": dict(KWOK_NODE),
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    **labels,
                },
            },
            "spec": {"taints": taints} if taints else {},
            # A node's status may be set on create; kwok's node-initialize keeps what is there.
            "status": {"allocatable": allocatable, "capacity": allocatable},
        }
        with contextlib.suppress(ApiError):
            return self.kube.create(node)
        return self.kube.get("v1", "Node", name)

    def wait_nodes_ready(self, names: list[str], timeout: float = 60) -> None:
        assert self.kube is not None
        kube = self.kube
        wait_for(
            lambda: all(
                condition(kube.get_or_none("v1", "Node", n), "Ready").get("status") == "True"
                for n in names
            ),
            timeout=timeout,
            what=f"nodes {names} Ready (kwok)",
            interval=0.5,
        )


def main() -> None:  # pragma: no cover - a developer's tool
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="workload-"))
    etcd_only = ControlPlane(workdir / "etcd")
    etcd_only.guard()
    (etcd_only.workdir / "logs").mkdir(parents=True, exist_ok=True)
    etcd_only._etcd(bin_dir() / "etcd")
    try:
        with WorkloadCluster(workdir, f"http://{LOCALHOST}:{etcd_only.ports.etcd}") as wl:
            wl.add_node("system-0", {}, [], {"cpu": "16", "memory": "64Gi", "pods": "110"})
            wl.wait_nodes_ready(["system-0"])
            print(f"up in {wl.timings['total']:.1f}s: {json.dumps(wl.timings)}")
            print(f"export KUBECONFIG={wl.kubeconfig}   # logs in {workdir / 'logs'}; Ctrl-C stops")
            with contextlib.suppress(KeyboardInterrupt):
                while all(p.alive() for p in wl.processes):
                    time.sleep(1)
    finally:
        etcd_only.stop()


if __name__ == "__main__":
    main()
