"""The workload cluster's own promises (tests/e2e/workload.py), without the providers: kwok's nodes
take pods, the real controllers report real status, chart webhooks are never called, and every
process stops by PID. A few seconds on the control plane's etcd."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from function import names
from function.clusters.eks import NETWORK_POLICY_FLAG, rolled_with
from function.serving import gateway_api, modelexpress
from function.serving.components import (
    BASELINE,
    ENVOY_GATEWAY_EXISTING_VALUES,
    GROVE_VALUES,
    PRIVILEGED,
    namespace,
)
from function.versions import CHARTS, GATEWAY_API_BUNDLE
from tests.charts import charts_dir, helm_bin
from tests.e2e.controlplane import LOCALHOST, ControlPlane
from tests.e2e.kube import ApiError, Kube, condition, wait_for
from tests.e2e.workload import WorkloadCluster

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
NAMESPACE = "default"


@pytest.fixture(scope="module")
def workload(control_plane: ControlPlane, tmp_path_factory):
    etcd = f"http://{LOCALHOST}:{control_plane.ports.etcd}"
    cluster = WorkloadCluster(tmp_path_factory.mktemp("workload"), etcd, prefix="/workload-probe")
    with cluster:
        cluster.add_node("system-0", {}, [], {"cpu": "8", "memory": "32Gi", "pods": "110"})
        cluster.add_node(
            "gpu-0",
            {"modelplane.ai/pool": "gpu"},
            [GPU_TAINT],
            {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"},
        )
        cluster.wait_nodes_ready(["system-0", "gpu-0"])
        yield cluster
    pids = [p.pid for p in cluster.processes]
    assert all(p.popen.poll() is not None for p in cluster.processes), pids


def template(name: str, **spec) -> dict:
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/x"}], **spec},
    }


def test_deployments_daemonsets_and_jobs_report_real_status(workload: WorkloadCluster):
    kube: Kube = workload.kube
    selector = lambda n: {"matchLabels": {"app": n}}  # noqa: E731
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NAMESPACE},
            "spec": {"replicas": 2, "selector": selector("web"), "template": template("web")},
        }
    )
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "gpu-agent", "namespace": NAMESPACE},
            "spec": {
                "selector": selector("gpu-agent"),
                "template": template(
                    "gpu-agent",
                    nodeSelector={"modelplane.ai/pool": "gpu"},
                    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
                ),
            },
        }
    )
    kube.apply(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "once", "namespace": NAMESPACE},
            "spec": {"template": template("once", restartPolicy="Never")},
        }
    )
    wait_for(
        lambda: condition(kube.get("apps/v1", "Deployment", "web", NAMESPACE), "Available").get(
            "status"
        )
        == "True",
        timeout=60,
        what="the Deployment Available",
    )
    wait_for(
        lambda: (kube.get("apps/v1", "DaemonSet", "gpu-agent", NAMESPACE).get("status") or {}).get(
            "numberReady"
        )
        == 1,
        timeout=60,
        what="the DaemonSet's pod Ready on the GPU node",
    )
    wait_for(
        lambda: condition(kube.get("batch/v1", "Job", "once", NAMESPACE), "Complete").get("status")
        == "True",
        timeout=60,
        what="the Job Complete",
    )
    pods = kube.list("v1", "Pod", NAMESPACE, label_selector="app=web")
    # The scheduler kept the untolerated pods off the tainted GPU node.
    assert {p["spec"]["nodeName"] for p in pods} == {"system-0"}, pods
    [agent] = kube.list("v1", "Pod", NAMESPACE, label_selector="app=gpu-agent")
    assert agent["spec"]["nodeName"] == "gpu-0"


def test_a_pod_asking_more_than_a_node_has_stays_pending(workload: WorkloadCluster):
    """Allocatable is real to the scheduler: nine GPUs fit on no node."""
    kube: Kube = workload.kube
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "greedy", "namespace": NAMESPACE},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "example.invalid/x",
                    "resources": {"limits": {"nvidia.com/gpu": "9"}},
                }
            ],
        },
    }
    kube.apply(pod)
    wait_for(
        lambda: condition(kube.get("v1", "Pod", "greedy", NAMESPACE), "PodScheduled").get("reason")
        == "Unschedulable",
        timeout=60,
        what="the scheduler to refuse the pod",
    )


def test_chart_webhooks_are_never_called(workload: WorkloadCluster):
    """A failing-closed webhook no pod serves does not block admission (the plugins are off)."""
    kube: Kube = workload.kube
    kube.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "nobody-serves-this"},
            "webhooks": [
                {
                    "name": "deny.example.invalid",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "clientConfig": {"service": {"name": "absent", "namespace": NAMESPACE}},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                }
            ],
        }
    )
    created = kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "admitted", "namespace": NAMESPACE},
            "data": {"k": "v"},
        }
    )
    assert created["metadata"]["uid"]


def test_its_own_etcd_prefix_keeps_it_apart(workload: WorkloadCluster, kube: Kube):
    """The management cluster does not see the workload cluster's objects (and the reverse)."""
    assert kube.get_or_none("v1", "Node", "gpu-0") is None
    with pytest.raises(ApiError):
        workload.kube.get(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", "inferenceclusters.modelplane.ai"
        )
    assert os.path.exists(workload.kubeconfig)


def test_a_hardened_cluster_refuses_a_privileged_pod_unless_its_namespace_says_so(
    control_plane: ControlPlane, tmp_path_factory
):
    """pod_security="baseline" (the Existing example's, Talos's defaults) is enforced by the real
    Pod Security admission: a privileged pod is refused in a namespace that says nothing and
    admitted in one labelled privileged, as the DRA driver's is (function/serving/components.py
    PRIVILEGED)."""
    etcd = f"http://{LOCALHOST}:{control_plane.ports.etcd}"
    cluster = WorkloadCluster(
        tmp_path_factory.mktemp("hardened"),
        etcd,
        prefix="/workload-hardened",
        pod_security="baseline",
    )
    with cluster:
        kube: Kube = cluster.kube
        privileged = {
            "containers": [
                {"name": "c", "image": "example.invalid/x", "securityContext": {"privileged": True}}
            ]
        }
        for name, labels in (("plain", {}), ("agents", PRIVILEGED)):
            kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels},
                }
            )
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"}, "spec": privileged}
        with pytest.raises(ApiError) as refused:
            kube.apply({**pod, "metadata": {"name": "agent", "namespace": "plain"}})
        assert "violates PodSecurity" in str(refused.value), refused.value
        kube.apply({**pod, "metadata": {"name": "agent", "namespace": "agents"}})
        assert kube.get("v1", "Pod", "agent", "agents")["spec"]["containers"][0]["securityContext"]


def helm4(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [helm_bin("HELM4", "helm4"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_grove_upgrades_under_helm_4_once_its_operator_has_filled_its_webhook_secret(
    workload: WorkloadCluster, tmp_path: Path
):
    """provider-helm v1.4.0 links Helm 4, which installs and upgrades by server-side apply.
    Grove's chart renders its webhook Secret with empty data, which the operator fills with an
    Update (cert-controller's rotator) under its own field manager: with the chart's default, the
    next upgrade conflicts on those fields (the control). With the function's values, the move
    (from that failed upgrade, too) deletes the chart's Secret, the operator makes its own (rolled by the pod annotation), and
    every later upgrade goes through, the operator's certificate kept."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(workload.kubeconfig_text())
    chart = charts_dir() / f"{CHARTS['grove'].name}-{CHARTS['grove'].version}"
    namespace, secret = CHARTS["grove"].namespace, "grove-webhook-server-cert"
    release = names.release_name("grove")
    before = {k: v for k, v in GROVE_VALUES.items() if k == "config"}  # v0.1.0's values
    files = {}
    for name, values in (("before", before), ("now", GROVE_VALUES)):
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump(values))
    kube: Kube = workload.kube
    filled = {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}

    def upgrade(values: str, *more: str) -> subprocess.CompletedProcess:
        return helm4(
            kubeconfig, "upgrade", release, str(chart), "-n", namespace, "-f", values, *more
        )

    installed = helm4(
        kubeconfig, "install", release, str(chart), "-n", namespace, "--create-namespace",
        "-f", str(files["before"]),
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    kube.patch("v1", "Secret", secret, {"data": filled}, namespace=namespace, manager="grove")
    # The control: the chart's Secret, filled by the operator, refuses any upgrade (and the
    # release, failed, is where provider-helm's retries would have left it).
    refused = upgrade(str(files["before"]), "--set-string", "podAnnotations.bump=1")
    assert refused.returncode != 0 and "conflict" in refused.stderr, refused
    moved = upgrade(str(files["now"]))
    assert moved.returncode == 0, moved.stderr
    assert kube.get_or_none("v1", "Secret", secret, namespace) is None
    operator = kube.get("apps/v1", "Deployment", "grove-operator", namespace)
    annotations = operator["spec"]["template"]["metadata"]["annotations"]
    assert annotations == GROVE_VALUES["podAnnotations"]
    # The new operator pod makes the Secret and fills it (createPlaceholderSecretIfNotExists).
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret, "namespace": namespace},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "", "tls.key": ""},
        }
    )
    kube.patch("v1", "Secret", secret, {"data": filled}, namespace=namespace, manager="grove")
    bumped = upgrade(str(files["now"]), "--set-string", "podAnnotations.bump=1")
    assert bumped.returncode == 0, bumped.stderr
    assert kube.get("v1", "Secret", secret, namespace)["data"] == filled
    assert helm4(kubeconfig, "uninstall", release, "-n", namespace).returncode == 0


def test_envoy_gateway_installs_over_another_owner_s_gateway_api_crds_only_at_its_own_bundle(
    workload: WorkloadCluster, tmp_path: Path
):
    """What function/serving/gateway_api.py decides by, with the real Helm 4 (provider-helm
    v1.4.0's) and API server: over Gateway API CRDs another manager applied at another bundle,
    Envoy Gateway's install fails on that owner's fields (the control: so the function holds it
    instead, and nothing is overwritten); over the bundle the chart carries, it installs, the
    owner's CRDs kept as they were, and with the function's Existing values no safe-upgrade
    policy."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(workload.kubeconfig_text())
    chart = charts_dir() / f"{CHARTS['envoy-gateway'].name}-{CHARTS['envoy-gateway'].version}"
    bundle = [
        c
        for c in yaml.safe_load_all((chart / "charts/crds/crds/gatewayapi-crds.yaml").read_text())
        if c
    ]
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(ENVOY_GATEWAY_EXISTING_VALUES))
    kube: Kube = workload.kube
    release, namespace = names.release_name("envoy-gateway"), CHARTS["envoy-gateway"].namespace

    def owner_applies(version: str) -> None:
        for crd in bundle:
            annotations = {**crd["metadata"]["annotations"], gateway_api.BUNDLE_VERSION: version}
            kube.apply(
                {**crd, "metadata": {**crd["metadata"], "annotations": annotations}},
                manager="gitops",
            )

    def install() -> subprocess.CompletedProcess:
        return helm4(
            kubeconfig, "install", release, str(chart), "-n", namespace, "--create-namespace",
            "-f", str(values), "--no-hooks",
        )  # fmt: skip

    wanted, _ = GATEWAY_API_BUNDLE
    owner_applies("v1.4.0")  # another bundle, as far as the annotations go
    refused = install()
    assert refused.returncode != 0 and "conflict" in refused.stderr, refused
    crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", gateway_api.SOUGHT.name)
    assert crd["metadata"]["annotations"][gateway_api.BUNDLE_VERSION] == "v1.4.0"
    helm4(kubeconfig, "uninstall", release, "-n", namespace)

    owner_applies(wanted)
    installed = install()
    assert installed.returncode == 0, installed.stderr
    crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", gateway_api.SOUGHT.name)
    assert crd["metadata"]["annotations"][gateway_api.BUNDLE_VERSION] == wanted
    assert "gitops" in {m["manager"] for m in crd["metadata"]["managedFields"]}
    policy = ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy")
    assert kube.get_or_none(*policy, "safe-upgrades.gateway.networking.k8s.io") is None
    assert kube.get_or_none("apps/v1", "Deployment", "envoy-gateway", namespace) is not None
    assert helm4(kubeconfig, "uninstall", release, "-n", namespace).returncode == 0


def aws_node_daemonset(network_policy: str) -> dict:
    """The VPC CNI's aws-node DaemonSet as its chart lays it out (aws/amazon-vpc-cni-k8s
    charts/aws-vpc-cni: host network, RollingUpdate maxUnavailable 10%, the node agent container
    with --enable-network-policy), on every node."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "aws-node", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": "aws-node"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": {"app": "aws-node"}},
                "spec": {
                    "hostNetwork": True,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {"name": "aws-node", "image": "example.invalid/cni"},
                        {
                            "name": "aws-eks-nodeagent",
                            "image": "example.invalid/agent",
                            "args": [f"--enable-network-policy={network_policy}"],
                        },
                    ],
                },
            },
        },
    }


def test_the_cni_policy_handover_reads_a_real_daemonset_rollout(workload: WorkloadCluster):
    """What the EKS renderer reads before it detaches the node role's CNI policy
    (eks.rolled_with): whenever it says the network-policy template has rolled out, every
    aws-node pod the real DaemonSet controller runs was created from that template, so none
    still holds credentials from before."""
    kube: Kube = workload.kube

    def pods() -> list[dict]:
        return kube.list("v1", "Pod", NAMESPACE, label_selector="app=aws-node")

    def agent_args(pod: dict) -> list[str]:
        [agent] = [c for c in pod["spec"]["containers"] if c["name"] == "aws-eks-nodeagent"]
        return agent.get("args") or []

    kube.apply(aws_node_daemonset("false"))
    ds = wait_for(
        lambda: (d := kube.get("apps/v1", "DaemonSet", "aws-node", NAMESPACE))
        and rolled_with(d, "--enable-network-policy=false")
        and d,
        timeout=60,
        what="aws-node on both nodes",
    )
    assert ds["status"]["desiredNumberScheduled"] == 2
    assert not rolled_with(ds, NETWORK_POLICY_FLAG)

    kube.apply(aws_node_daemonset("true"))
    seen_rolled = 0
    last_rolled: dict = {}
    for _ in range(240):
        ds = kube.get("apps/v1", "DaemonSet", "aws-node", NAMESPACE)
        if rolled_with(ds, NETWORK_POLICY_FLAG):
            running = [p for p in pods() if not p["metadata"].get("deletionTimestamp")]
            assert len(running) == 2, running
            assert all(NETWORK_POLICY_FLAG in agent_args(p) for p in running), running
            seen_rolled += 1
            last_rolled = ds
            if seen_rolled >= 3:
                break
        time.sleep(0.25)
    assert seen_rolled >= 3, f"the new template never rolled out: {ds.get('status')}"
    assert last_rolled["status"]["observedGeneration"] == last_rolled["metadata"]["generation"]
    kube.delete("apps/v1", "DaemonSet", "aws-node", NAMESPACE)


def provider_kubernetes_applies(kube: Kube, manifest: dict) -> dict:
    """What provider-kubernetes v1.3.1 does with an Object's manifest by default
    (`--enable-server-side-apply`, on): a forced server-side apply under a field manager of the
    Object's own (tests/e2e/test_workload.py runs the real provider)."""
    return kube.apply(manifest, manager="provider-kubernetes/e2e-modelexpress")


def endpoints(kube: Kube, namespace_: str) -> list:
    slices = kube.list(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        namespace_,
        label_selector=f"kubernetes.io/service-name={modelexpress.NAME}",
    )
    return [e for s in slices for e in s.get("endpoints") or []]


def test_modelexpress_moves_out_of_default_behind_an_alias_of_its_old_service(
    workload: WorkloadCluster,
):
    """A live cluster's move (function/serving/modelexpress.py) on a real API server: the new
    server runs under Pod Security baseline, and the old ClusterIP Service, applied over as the
    alias as provider-kubernetes does, is accepted with its ClusterIP released; once the old
    server goes, nothing is left behind the old name but the alias (and, until removed, the
    EndpointSlice the controller no longer updates)."""
    kube: Kube = workload.kube
    old = [modelexpress.server(k, "default") for k in ("ServiceAccount", "Service", "Deployment")]
    new = [namespace(modelexpress.NAMESPACE, BASELINE)]
    new += [modelexpress.server(k) for k in ("ServiceAccount", "Role", "RoleBinding", "Service")]
    new.append(modelexpress.server("Deployment"))

    def available(ns: str) -> bool:
        deployment = kube.get("apps/v1", "Deployment", modelexpress.NAME, ns)
        return condition(deployment, "Available").get("status") == "True"

    for manifest in old:
        provider_kubernetes_applies(kube, manifest)
    wait_for(lambda: available("default"), timeout=60, what="the old server Available")
    wait_for(lambda: endpoints(kube, "default"), timeout=60, what="the old Service's endpoints")
    was = kube.get("v1", "Service", modelexpress.NAME, "default")
    assert was["spec"]["clusterIP"] not in ("", "None")
    for manifest in new:
        provider_kubernetes_applies(kube, manifest)
    wait_for(lambda: available(modelexpress.NAMESPACE), timeout=60, what="the new server Available")
    alias = provider_kubernetes_applies(kube, modelexpress.alias())
    spec = alias["spec"]
    assert spec["type"] == "ExternalName"
    assert spec["externalName"] == f"{modelexpress.NAME}.{modelexpress.NAMESPACE}.svc.cluster.local"
    # The API server released the ClusterIP (pkg/registry/core/service dropTypeDependentFields),
    # and the apply took away the selector and ports it no longer names: kube-proxy programs
    # nothing for an ExternalName Service (pkg/proxy/util ShouldSkipService), cluster DNS answers
    # its names with the CNAME.
    assert "clusterIP" not in spec and "clusterIPs" not in spec, spec
    assert "selector" not in spec and "ports" not in spec, spec
    assert kube.delete("apps/v1", "Deployment", modelexpress.NAME, "default")
    wait_for(
        lambda: not kube.list("v1", "Pod", "default", label_selector=f"app={modelexpress.NAME}"),
        timeout=60,
        what="the old server's pods gone",
    )
    # The Endpoints and EndpointSlice controllers leave an ExternalName Service's objects as they
    # were (pkg/controller/endpoint and endpointslice syncService return early), and the
    # mirroring controller copies the stale Endpoints of a Service without selector into a slice
    # of its own: the old pod's address stays listed, unused, until both are removed by hand
    # (docs/stack.md); removed, they do not come back.
    assert endpoints(kube, "default")
    kube.delete("v1", "Endpoints", modelexpress.NAME, "default")
    slices = kube.list(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        "default",
        label_selector=f"kubernetes.io/service-name={modelexpress.NAME}",
    )
    for found in slices:
        kube.delete("discovery.k8s.io/v1", "EndpointSlice", found["metadata"]["name"], "default")
    wait_for(lambda: not endpoints(kube, "default"), timeout=30, what="the stale slices gone")
    time.sleep(5)
    assert not endpoints(kube, "default")
    assert endpoints(kube, modelexpress.NAMESPACE)
    # Applying it again changes nothing (the function sends the same manifest every reconcile).
    again = provider_kubernetes_applies(kube, modelexpress.alias())
    assert again["spec"] == spec
