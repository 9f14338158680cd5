"""The serving stack as a table: what each component is, what it waits for, what outlives it.

A component is a Helm chart (a provider-helm Release) or one manifest (a provider-kubernetes
Object). `after` names the components that must be Ready before it is first created, because it
needs their CRDs or their objects; the same edges order deletion (issue: Usages), so whatever a
component comes after also outlives it. `watches` names components whose objects it looks at:
it is first created once they are Ready and outlives them. Versions live in function/versions.py.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from function import names, wire
from function.models import CLOUD_BLOCKS
from function.serving import (
    crd_job,
    drains,
    gateway,
    gpu_health,
    gpu_metrics,
    gpus,
    modelexpress,
    modelexpress_crds,
)
from function.versions import CHART_CRDS, CHARTS, Chart
from function.workload import GATEWAY_LOAD_BALANCER, GPU_TOLERATION

STANDARD, DYNAMO = "Standard", "Dynamo"
BOTH = frozenset({STANDARD, DYNAMO})
EXISTING = "Existing"
PROVISIONED = frozenset(CLOUD_BLOCKS) - {EXISTING}
EKS_ONLY = frozenset({"EKS"})
# provider-kubernetes management policies (crossplane-runtime's supported sets): read only, or
# read and delete what another controller made.
OBSERVE = ("Observe",)
OBSERVE_DELETE = ("Observe", "Delete")
# Everything but Delete: the object is the function's to make and keep, not to remove.
NO_DELETE = ("Observe", "Create", "Update", "LateInitialize")
CRDS = Path(__file__).parent / "crds"


@dataclass(frozen=True)
class Context:
    """What the components of one cluster are built from."""

    xr: str
    stack: str
    hostname: str
    nvidia_driver_root: str
    # The InferenceGateways' client CAs; None while Crossplane has not answered yet.
    client_cas: tuple[gateway.ClientCA, ...] | None
    # What the gateway's Service carries for the cloud's load balancer.
    load_balancer_annotations: tuple[tuple[str, str], ...] = ()
    # The cluster's source (spec.cluster.source).
    source: str = ""
    # The moves of a live cluster's objects whose new home now serves, by name (read from what is
    # observed: function/serving/modelexpress.py).
    moved: frozenset[str] = frozenset()
    # Whether the GPU metrics release still renders its ServiceMonitor, handing it over
    # (function/serving/gpu_metrics.py release_renders).
    service_monitor: bool = False
    # EKS: whether the function places the node monitoring agent's DCGM host engine
    # (function/clusters/eks_dcgm.py owned), which the GPU metrics releases follow.
    dcgm_owned: bool = False
    # Whether gateway-helm's CRD Job applies the Gateway API CRDs too: not on an Existing cluster
    # whose Gateway API CRDs are someone else's (stack.gateway_api_crds_ours).
    gateway_api_crds: bool = True


# A builder returns the manifest (or chart values), or None for "not now": a component already
# composed is then kept as it is, one not composed yet waits.
Build = Callable[[Context], dict | None]


@dataclass(frozen=True)
class Component:
    key: str
    build: Build
    after: tuple[str, ...] = ()
    watches: tuple[str, ...] = ()
    stacks: frozenset[str] = BOTH
    # The cluster sources it goes on (None: every one).
    sources: frozenset[str] | None = None
    chart: bool = False
    # Charts: helm --wait. Manifests: a CEL readiness query over the remote object.
    wait: bool = False
    ready_when: str | None = None
    # Objects: provider-kubernetes management policies (None: it manages the object whole).
    policies: tuple[str, ...] | None = None
    # What build always returns, when it is not built from the cluster's context.
    fixed: dict | None = None
    # Made for the named component's release (its namespace, a watch on what it installs):
    # composed only once the function is to install that release, never beside or over one it
    # adopts (an adopted release's namespace taken over would be deleted with the XR).
    inside: str = ""
    # The sources on whose clusters deleting the XR leaves it there (management policies without
    # Delete): a namespace on a cluster someone else runs may hold what is not the function's.
    left_on: frozenset[str] = frozenset()
    # Charts: the chart versions provider-helm may roll a failed or stuck upgrade back to, from
    # the first up to (not including) the second (None: any). Until the release has deployed a
    # version in it, only a failed first install is retried (uninstalled and installed again):
    # for a chart whose node state another line cannot read, a rollback never leaves its line.
    rolls_back_within: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
    # Charts: the components that apply the chart's own CRDs (also in `after`). The release is
    # installed without them (skipCRDs) and moves to a new chart version only once they have.
    crds: tuple[str, ...] = ()
    # Charts: the component of the Job that applies the chart's crds/ (crd_job.py). The release
    # is first installed once it is Complete, without them (skipCRDs), and moves to a new chart
    # version only once that version's Job is. Not in `after`: the release's deletion order
    # (its Usages) stays as it was, and a finished Job orders nothing at deletion.
    crd_job: str = ""
    # A component of an earlier layout that a new one replaces: composed only where it already
    # runs (never first created), and no longer once retired(observed) says its replacement
    # serves, so Crossplane deletes it then.
    retired: Callable[[Mapping], bool] | None = None
    # Charts: another release of the chart pinned as CHARTS[first], in a namespace of its own
    # (a chart that names some objects the same in every release cannot hold two in one).
    second_of: tuple[str, str] | None = None

    @functools.cached_property
    def resource_key(self) -> str:
        return f"release-{self.key}" if self.chart else self.key

    @functools.cached_property
    def pinned(self) -> Chart:
        """The chart a chart component installs, where."""
        if self.second_of is None:
            return CHARTS[self.key]
        first, namespace = self.second_of
        return dataclasses.replace(CHARTS[first], namespace=namespace)


def chart(key: str, values: dict | Build, *, crds: tuple[str, ...] = (), **kw) -> Component:
    if crds:
        kw["after"] = (*kw.get("after", ()), *crds)
    return _component(key, values, chart=True, crds=crds, **kw)


def manifest(key: str, body: dict | Build, **kw) -> Component:
    return _component(key, body, **kw)


def _component(key: str, made: dict | Build, **kw) -> Component:
    if callable(made):
        return Component(key, made, **kw)
    # Encoded once for every cluster: the same manifest or values go into each one's body.
    return Component(key, lambda _ctx: made, fixed=wire.fixed(made), **kw)


def _crds_in(file: str) -> list[dict]:
    """The CRDs of a file `make setup` (hack/crds/fetch.sh) puts in the package at build time."""
    path = CRDS / file
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: build the package with `make setup`")
    return [_as_applied(doc) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _as_applied(crd: dict) -> dict:
    """A CRD as published by controller-gen, without what it writes for the API server to fill
    (`metadata.creationTimestamp: null`, a `status` of nulls). The API server drops those nulls
    from the stored Object, so Crossplane's next apply of them changes the Object again: its
    provider reconciles, the XR hears of it, and Crossplane's watch circuit breaker throttles the
    XR (seen in the workload e2e: thousands of events from the two GAIE CRD Objects)."""
    meta = {k: v for k, v in crd.get("metadata", {}).items() if v is not None}
    return {k: v for k, v in crd.items() if k != "status"} | {"metadata": meta}


def _crd(file: str) -> dict:
    (crd,) = _crds_in(file)
    return crd


# Which chart version a CRD the function applies for a chart came from: the release moves to a
# new version once the cluster's CRDs carry it (function/serving/stack.py).
CHART_OF_CRD = "modelplane.ai/chart"


def chart_mark(key: str) -> str:
    """What a chart's CRDs carry under CHART_OF_CRD: Helm's chart label, name-version."""
    return f"{CHARTS[key].name}-{CHARTS[key].version}"


def chart_crds(key: str, prefix: str, **kw) -> tuple[Component, ...]:
    """One Object per CRD of the chart's crds/ (CHART_CRDS), marked with the chart's version.

    Helm installs crds/ once and never upgrades them (helm.sh/docs/chart_best_practices/
    custom_resource_definitions), and provider-helm only offers skipCRDs: applied by the function,
    they move with every chart bump, before the controller that needs them. Never deleted through
    their Objects, on any cluster (as Helm never deletes crds/): deleting a CRD deletes every
    object of its kind (NFD's NodeFeatures, and with them the GPU labels the DRA plugin is
    placed by); a provisioned cluster's go with it."""
    made = []
    for crd in _crds_in(CHART_CRDS[key]):
        meta = crd["metadata"]
        annotations = {**meta.get("annotations", {}), CHART_OF_CRD: chart_mark(key)}
        marked = {**meta, "annotations": annotations}
        plural = crd["spec"]["names"]["plural"]
        made.append(
            manifest(
                f"{prefix}-{plural}",
                {**crd, "metadata": marked},
                ready_when=f"{CRD_ESTABLISHED} && {marked_with(key)}",
                policies=NO_DELETE,
                **kw,
            )
        )
    return tuple(made)


def marked_with(key: str) -> str:
    """CEL: the remote CRD carries the chart's mark. Ready then means the function's CRD was
    applied, not merely that a CRD of that name is Established (provider-kubernetes derives
    readiness from the observed object even when its apply failed)."""
    return (
        f"has(object.metadata.annotations) && '{CHART_OF_CRD}' in object.metadata.annotations"
        f" && object.metadata.annotations['{CHART_OF_CRD}'] == '{chart_mark(key)}'"
    )


@functools.cache
def crd_job_manifests(key: str, gateway_api: bool) -> dict[str, dict]:
    """What the chart's CRD Job applies on a cluster, made and encoded once (wire.fixed) for
    every cluster with the same selection."""
    spec = crd_job.chart_crds(key, gateway_api=gateway_api)
    return {role: wire.fixed(body) for role, body in crd_job.job_resources(spec).items()}


def crd_job_spec(key: str, ctx: Context) -> crd_job.ChartCRDs:
    """What the chart's CRD Job applies on this cluster."""
    return crd_job.chart_crds(key, gateway_api=ctx.gateway_api_crds)


def crd_job_components(key: str, **kw) -> tuple[Component, ...]:
    """The Job that applies the chart's crds/ (crd_job.py), its account and what that may do;
    the last is the Job, which the chart's release names as its crd_job. Made in
    names.SYSTEM_NAMESPACE, on every cluster (the gateway's namespace comes first)."""
    roles = (crd_job.SERVICE_ACCOUNT, crd_job.CLUSTER_ROLE, crd_job.BINDING)
    made = []
    after: tuple[str, ...] = ("gateway-namespace",)
    for role in roles:
        made.append(
            manifest(
                f"crds-{key}-{role}",
                lambda ctx, role=role: crd_job_manifests(key, ctx.gateway_api_crds)[role],
                after=after if role == crd_job.SERVICE_ACCOUNT else (),
                **kw,
            )
        )
    made.append(
        manifest(
            crd_job_key(key),
            lambda ctx: crd_job_manifests(key, ctx.gateway_api_crds)[crd_job.JOB],
            after=tuple(c.key for c in made),
            ready_when=crd_job.JOB_COMPLETE,
            **kw,
        )
    )
    return tuple(made)


def crd_job_key(key: str) -> str:
    return f"crds-{key}-job"


# Pod Security admission (kubernetes.io/docs/concepts/security/pod-security-admission): a cluster
# that enforces baseline or restricted by default (Talos, hardened distributions) refuses a pod
# that mounts host paths or runs privileged unless its namespace says so. NFD's worker mounts
# /boot, /sys, /usr/lib and /etc of the host (node-feature-discovery 0.18.3 templates/worker.yaml);
# the DRA driver's kubelet plugin runs privileged (dra-driver-nvidia-gpu 0.4.1
# templates/kubeletplugin.yaml). The GPU probes need nothing above baseline and say so.
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}
BASELINE = {"pod-security.kubernetes.io/enforce": "baseline"}


def namespace(name: str, labels: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


# dra-driver-nvidia-gpu 0.4.1 names its objects and its selector label after nameOverride or else
# the chart (templates/_helpers.tpl): under the old chart's name, every object a live release of
# nvidia-dra-driver-gpu 25.12.0 made keeps its name, and the kubelet plugin DaemonSet its selector
# (nvidia-dra-driver-gpu-component: kubelet-plugin, immutable), so the upgrade updates each in
# place; under the new name it would install a second kubelet plugin beside the first.
DRA_DRIVER_NAME = "nvidia-dra-driver-gpu"
# The chart rolls its kubelet plugin on every GPU node at once (maxUnavailable 100%): a new version
# that cannot start on this cloud's GPU image, or an image pull slower than the 30 s the kubelet
# keeps a departed plugin's ResourceSlices, would leave every node without claimable GPUs. A tenth
# at a time, each waiting for the last to be Ready: a bad version stops at the first tenth.
DRA_PLUGIN_ROLLOUT = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}


def dra_driver_values(ctx: Context) -> dict:
    """GPUs through DRA only (no compute domains: no multi-node NVLink)."""
    values: dict = {
        "nameOverride": DRA_DRIVER_NAME,
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "kubeletPlugin": {"tolerations": [GPU_TOLERATION], "updateStrategy": DRA_PLUGIN_ROLLOUT},
    }
    if ctx.nvidia_driver_root != "/":
        values["nvidiaDriverRoot"] = ctx.nvidia_driver_root
    return values


def _cert_manager(name: str) -> dict:
    """One of cert-manager's Deployments, drain-safe: its webhook refuses every cert-manager write
    while down, cainjector keeps webhooks' caBundles in step with renewals."""
    release = names.release_name("cert-manager")
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": release}
    values = drains.chart_values(labels)
    # The chart passes the policy through (cert-manager v1.20.2 templates/
    # *poddisruptionbudget.yaml): a replica that never turns Ready does not block a drain of its
    # node for good (stack review).
    values["podDisruptionBudget"] |= {"unhealthyPodEvictionPolicy": drains.ALWAYS_ALLOW}
    return values


CERT_MANAGER_VALUES = {
    # CRDs outlive the chart: an uninstall never takes Certificates with it.
    "crds": {"enabled": True, "keep": True},
    "enableCertificateOwnerRef": True,
    **_cert_manager("cert-manager"),
    "webhook": _cert_manager("webhook"),
    "cainjector": _cert_manager("cainjector"),
}

# trust-manager v0.24.0's webhook is fail-closed on every Bundle write (templates/webhook.yaml), and
# the gateway's CA is published through one: two replicas (its controller leader-elects,
# app.leaderElection.enabled; every replica serves the webhook), spread, under the chart's budget.
TRUST_MANAGER_VALUES = {
    "crds": {"enabled": True, "keep": True},
    "app": {"trust": {"namespace": names.SYSTEM_NAMESPACE}},
    "defaultPackage": {"enabled": False},
    **drains.chart_values(
        {"app": "trust-manager", "app.kubernetes.io/instance": names.release_name("trust-manager")}
    ),
}

AI_GATEWAY_CONTROLLER = "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local"
ENVOY_GATEWAY_VALUES = {
    # Two controllers: each serves the proxies their configuration (a proxy that starts while
    # none runs stays not Ready; gateway-helm v1.8.3 leader election keeps one writing), spread,
    # under a budget (the chart's default, minAvailable 0, makes none).
    "deployment": {
        "replicas": drains.REPLICAS,
        "pod": {
            "topologySpreadConstraints": drains.spread(
                {
                    "control-plane": "envoy-gateway",
                    "app.kubernetes.io/name": "gateway-helm",
                    "app.kubernetes.io/instance": names.release_name("envoy-gateway"),
                }
            )
        },
    },
    "podDisruptionBudget": dict(drains.BUDGET),
    "config": {
        "envoyGateway": {
            "extensionApis": {"enableBackend": True},
            # HTTPRoutes may use InferencePool backends through the AI Gateway extension.
            "extensionManager": {
                "hooks": {
                    "xdsTranslator": {
                        "translation": {
                            "listener": {"includeAll": True},
                            "route": {"includeAll": True},
                            "cluster": {"includeAll": True},
                            "secret": {"includeAll": True},
                        },
                        "post": ["Translation", "Cluster", "Route"],
                    }
                },
                "service": {"fqdn": {"hostname": AI_GATEWAY_CONTROLLER, "port": 1063}},
                "backendResources": [
                    {
                        "group": "inference.networking.k8s.io",
                        "kind": "InferencePool",
                        "version": "v1",
                    }
                ],
            },
        }
    },
}

# On a cluster someone else runs, without the chart's cluster-wide safe-upgrade
# ValidatingAdmissionPolicy (gateway-helm v1.8.3 charts/crds/templates/
# gatewayapi-safe-upgrade-policy.yaml): it refuses every write of Gateway API CRDs older than
# v1.5.0 or of the standard channel over experimental, so it would lock the cluster's owner out of
# managing its Gateway API CRDs as before.
ENVOY_GATEWAY_EXISTING_VALUES = wire.fixed(
    {**ENVOY_GATEWAY_VALUES, "crds": {"gatewayAPI": {"safeUpgradePolicy": {"enabled": False}}}}
)
wire.fixed(ENVOY_GATEWAY_VALUES)


def envoy_gateway_values(ctx: Context) -> dict:
    """Either constant, encoded once (wire.fixed): a builder's body is otherwise made again by
    content at every reconcile."""
    return ENVOY_GATEWAY_EXISTING_VALUES if ctx.source == EXISTING else ENVOY_GATEWAY_VALUES


# ai-gateway-helm v1.1.0's pod webhook (fail-closed for every pod Envoy Gateway manages) serves a
# certificate. By default the chart makes it inside Helm (templates/admission_webhook.yaml:
# genSignedCert for 365 days, handed back by `lookup` on every upgrade) and nothing renews it: a
# year after install no proxy pod could start. With certManager.enable the chart's Certificate,
# signed by its own self-signed Issuer, is renewed by cert-manager (90 days, a third before the
# end) and cainjector keeps the webhook's caBundle in step. The Secret gets a new name: the old
# release's Secret of the chart's default name is deleted by the upgrade that makes the
# Certificate, and cert-manager would issue into it as Helm deletes it; under a new name the
# controller's pods roll to it once cert-manager has written it.
AI_GATEWAY_WEBHOOK_SECRET = "mp-ai-gateway-webhook-tls"  # noqa: S105 - a Secret's name
AI_GATEWAY_POD_LABELS = {
    # The chart's selector labels (templates/_helpers.tpl controller.selectorLabels).
    "app.kubernetes.io/name": "ai-gateway-helm",
    "app.kubernetes.io/instance": names.release_name("ai-gateway"),
}
AI_GATEWAY_VALUES = {
    "controller": {
        "logRequestHeaderAttributes": "x-modelplane-caller:caller",
        # Every new proxy pod needs its webhook: two, spread, one at a time through a drain.
        **drains.chart_values(AI_GATEWAY_POD_LABELS),
        "mutatingWebhook": {
            "tlsCertSecretName": AI_GATEWAY_WEBHOOK_SECRET,
            "certManager": {"enable": True},
        },
    }
}

# node-feature-discovery 0.18.3 names a PCI device's label after deviceLabelFields, by default class
# and vendor (source/pci/pci.go newDefaultConfig): pci-0302_10de.present on an NVIDIA GPU, which the
# kubelet plugin affinity of nvidia-dra-driver-gpu 25.12.0 never matched (values.yaml wants
# feature.node.kubernetes.io/pci-10de.present; dra-driver-nvidia-gpu 0.4.1 takes either). By vendor
# alone every NVIDIA GPU node gets pci-10de.present=true, the label both lines place their plugin
# by (and the GPU operator configures NFD so too): live clusters' labels stay as they are.
#
# No post-delete prune: NFD 0.18.3's post-delete Job runs `nfd-master -prune`, which strips every
# label the node's nfd.node.kubernetes.io annotation lists, another NFD's included (where one runs
# beside it, the GPU Operator then reads its GPUs as gone and removes its operands).
NFD_VALUES = {
    "postDeleteCleanup": False,
    # Without its master a new GPU node gets no labels, so no DRA plugin and no claimable GPUs:
    # two (leader elected), under the chart's budget (minAvailable 1).
    "master": {"replicaCount": drains.REPLICAS, "podDisruptionBudget": {"enable": True}},
    "worker": {
        "tolerations": [GPU_TOLERATION],
        "config": {"sources": {"pci": {"deviceLabelFields": ["vendor"]}}},
    },
}


# The DRA driver's kubelet plugin DaemonSet, as its chart names it (templates/kubeletplugin.yaml).
DRA_KUBELET_PLUGIN = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": f"{DRA_DRIVER_NAME}-kubelet-plugin", "namespace": "nvidia-dra-driver"},
}


# Envoy Gateway v1.8.3 watches the InferencePools named in backendResources and reports ready only
# once every informer has synced, but its chart's ClusterRole cannot read them; ai-gateway-helm
# ships the grant (envoy_gateway_cluster_role_for_inference_pool.yaml) and comes after Envoy
# Gateway. So the grant, and the InferencePool CRD, come first (as the AI Gateway's own e2e does).
# The service account's name is fixed by gateway-helm (envoy-gateway-serviceaccount.yaml).
INFERENCE_POOL_READER = "modelplane:envoy-gateway-inferencepool-reader"
INFERENCE_POOL_READER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": INFERENCE_POOL_READER},
    "rules": [
        {
            "apiGroups": ["inference.networking.k8s.io"],
            "resources": ["inferencepools"],
            "verbs": ["get", "list", "watch"],
        }
    ],
}
INFERENCE_POOL_READER_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": INFERENCE_POOL_READER},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": INFERENCE_POOL_READER,
    },
    "subjects": [
        {
            "kind": "ServiceAccount",
            "name": "envoy-gateway",
            "namespace": CHARTS["envoy-gateway"].namespace,
        }
    ],
}

# Grove v0.1.0-alpha.11 defaults its scheduler profile to default-scheduler
# (operator/api/config/v1alpha1/defaults.go): a PodCliqueSet that names no scheduler bypasses KAI
# and is never gang-scheduled. The chart's config.scheduler.defaultProfileName
# (templates/_helpers.tpl) makes KAI the default; its profiles list already enables kai-scheduler,
# whose CRDs come first.
# The operator makes its webhook Secret itself (operator/internal/controller/cert/cert.go
# createPlaceholderSecretIfNotExists; the pod mounts it optional): the chart's own, rendered with
# empty data the operator then fills, conflicts under Helm 4's server-side apply (provider-helm
# v1.4.0) on every upgrade of the release. The pod annotation rolls the operator on the upgrade
# that stops rendering the Secret (and deletes it), so the new pod makes it at once.
# Its CRDs move with the chart through its own installer (values.yaml crdInstaller; an init
# container running operator/cmd/install-crds, a server-side apply of the CRDs built into the
# image of the chart's version, at every start of the operator's pod, so at every upgrade): Helm
# never upgrades crds/ (docs/installation.md at the tag pairs it with webhookServerSecret off, as
# here). It gives the operator's ServiceAccount get, create, update and patch on its five CRDs by
# name, nothing more (templates/clusterrole.yaml).
# Its webhooks (PodCliqueSet defaulting and validation, fail-closed) admit every Dynamo engine:
# two replicas (its controllers leader-elect, config.leaderElection on by default; every replica
# serves the webhooks; cert-controller v0.14.0's rotator runs in each, RequireLeaderElection off,
# and a write of the shared Secret that fails is retried with backoff after reading it again,
# pkg/rotator/rotator.go refreshCertIfNeeded), under a budget the function composes (the
# chart has none), selecting the chart's deployment.labels (templates/_helpers.tpl).
GROVE_VALUES = {
    "webhookServerSecret": {"enabled": False},
    "podAnnotations": {"modelplane.ai/webhook-secret": "made-by-the-operator"},
    "crdInstaller": {"enabled": True},
    "replicaCount": drains.REPLICAS,
    # Ready only once its certificates are in place and its webhook server serves
    # (cmd/main.go, manager.go at the tag): off by default, a new pod would count as available,
    # to the rollout and to the budget, before it can admit anything.
    "config": {
        "scheduler": {"defaultProfileName": "kai-scheduler"},
        "server": {"healthProbes": {"enable": True}},
    },
}
GROVE_POD_LABELS = {
    "app.kubernetes.io/component": "operator-deployment",
    "app.kubernetes.io/name": "grove-operator",
    "app.kubernetes.io/part-of": "grove",
}
GROVE_BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "grove-operator", "namespace": CHARTS["grove"].namespace},
    "spec": {**drains.OWN_BUDGET, "selector": {"matchLabels": GROVE_POD_LABELS}},
}

# Engine pods are admitted by the LWS controller's pod webhooks (fail-closed, every namespace) and
# by KAI's admission (pods with schedulerName kai-scheduler), and KAI's scheduler, binder and
# podgrouper place them: with one replica, a drain of its node holds every new engine pod.
# lws v0.8.0 leader-elects (its config) and its chart has no budget: the function composes one
# for the controller's pods (the chart's selector labels, templates/manager/deployment.yaml).
LWS_VALUES = {"replicaCount": drains.REPLICAS}
LWS_POD_LABELS = {
    "control-plane": "controller-manager",
    "app.kubernetes.io/name": "lws",
    "app.kubernetes.io/instance": names.release_name("leader-worker-set"),
}
LWS_BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {
        "name": "lws-controller-manager",
        "namespace": CHARTS["leader-worker-set"].namespace,
    },
    "spec": {**drains.OWN_BUDGET, "selector": {"matchLabels": LWS_POD_LABELS}},
}
# kai-scheduler v0.16.8 hands operator.replicaCount to every operand through its kai-config
# (templates/_helpers.tpl global.replicaCount) and turns leader election on above one
# (templates/services/operator.yaml).
KAI_VALUES = {"operator": {"replicaCount": drains.REPLICAS}}
# Its operator makes a budget for admission alone (pkg/operator/operands/common/common.go
# PodDisruptionBudgetImplementedServices at v0.16.8), and keeps no two replicas apart (no
# affinity unless one is configured): a drain of the node holding both replicas of the scheduler,
# binder, pod grouper or the podgroup and queue controllers (whose webhooks are fail-closed)
# would take them down together. So the function composes theirs, and the chart's operator's,
# each selecting the `app` label the operator gives an operand's pods (common.go, the scheduler's
# <schedulerName>-<shard>: resources_for_shard.go), never admission's (two budgets over one pod
# refuse every eviction of it).
KAI_BUDGETED = (
    "kai-scheduler-default",
    "binder",
    "pod-grouper",
    "podgroup-controller",
    "queue-controller",
    "kai-operator",
)


def kai_budget(app: str) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": CHARTS["kai-scheduler"].namespace},
        "spec": {**drains.OWN_BUDGET, "selector": {"matchLabels": {"app": app}}},
    }


CRITICAL_PODS_QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "allow-critical-pods", "namespace": "nvidia-dra-driver"},
    "spec": {
        "hard": {"pods": "1000"},
        "scopeSelector": {
            "matchExpressions": [
                {
                    "operator": "In",
                    "scopeName": "PriorityClass",
                    "values": ["system-node-critical", "system-cluster-critical"],
                }
            ]
        },
    },
}


def gpu_metrics_release(
    key: str,
    namespace_key: str,
    quota_key: str,
    values: Build,
    sources: frozenset[str] | None = None,
    second_of: tuple[str, str] | None = None,
) -> tuple[Component, ...]:
    """A DCGM exporter release with its own namespace (Pod Security privileged: host paths,
    SYS_ADMIN) and that namespace's critical-pods quota: its pods keep the chart's priority
    (system-node-critical: GPU metrics on the busiest nodes too)."""
    name = second_of[1] if second_of else CHARTS[key].namespace
    quota = {**CRITICAL_PODS_QUOTA, "metadata": {"name": "allow-critical-pods", "namespace": name}}
    return (
        manifest(namespace_key, namespace(name, PRIVILEGED), inside=key, sources=sources),
        manifest(quota_key, quota, after=(namespace_key,), inside=key, sources=sources),
        chart(key, values, after=(quota_key,), sources=sources, second_of=second_of),
    )


def gpu_metrics_values(ctx: Context) -> dict:
    return gpu_metrics.values(
        ctx.source, ctx.service_monitor, ctx.nvidia_driver_root, ctx.dcgm_owned
    )


def gpu_metrics_embedded_values(ctx: Context) -> dict:
    return gpu_metrics.EMBEDDED_VALUES[ctx.dcgm_owned]


def _when_clients(build: Callable[[Context], dict]) -> Build:
    """Composed once an InferenceGateway has published a client CA."""
    return lambda ctx: build(ctx) if ctx.client_cas else None


def _client_cas(ctx: Context) -> dict | None:
    return gateway.client_ca_configmap(ctx.client_cas) if ctx.client_cas else None


def queue(name: str, parent: str | None) -> dict:
    """A KAI Queue with unlimited quota; the modelplane queue hangs under the root one."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict = {"resources": {"cpu": unlimited, "gpu": unlimited, "memory": unlimited}}
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


CRD_ESTABLISHED = "has(object.status) && has(object.status.conditions) && " + (
    "object.status.conditions.exists(c, c.type == 'Established' && c.status == 'True')"
)
DEPLOYMENT_AVAILABLE = (
    "has(object.status) && has(object.status.conditions) && "
    "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')"
)


MODELEXPRESS_CRDS = ("modelexpress-crd-modelmetadatas", "modelexpress-crd-modelcacheentries")


def _never(_observed: Mapping) -> bool:
    """Kept for good once there (the alias of a moved Service)."""
    return False


def own_budget(key: str, budget: dict, release: str, stack: str) -> Component:
    """A disruption budget the function composes for a chart that makes none: once its release
    is Ready, and never beside a release it adopts."""
    return manifest(key, budget, after=(release,), stacks=frozenset({stack}), inside=release)


def table() -> tuple[Component, ...]:
    """Every component, in the order they are composed (a component's `after` come first)."""
    nfd_crds = chart_crds("node-feature-discovery", "nfd-crd", inside="node-feature-discovery")
    return (
        # Certificates, trust, and the namespaces the stack's own objects live in.
        chart("cert-manager", CERT_MANAGER_VALUES, wait=True),
        # On an Existing cluster it may be there already, holding what others put there (a
        # trust-manager reading the gateway's CA there): taken up, never deleted.
        manifest(
            "gateway-namespace",
            namespace(names.SYSTEM_NAMESPACE, {"modelplane.ai/namespace": names.SYSTEM_NAMESPACE}),
            left_on=frozenset({EXISTING}),
        ),
        chart(
            "trust-manager",
            TRUST_MANAGER_VALUES,
            # Its trust namespace exists before it installs (the chart's NOTES.txt).
            after=("cert-manager", "gateway-namespace"),
            wait=True,
        ),
        # Gateway API, the endpoint picker's CRDs, Envoy Gateway and the Envoy AI Gateway.
        manifest(
            "gaie-crd-inferencepools",
            _crd("inference.networking.k8s.io_inferencepools.yaml"),
            ready_when=CRD_ESTABLISHED,
        ),
        manifest(
            "gaie-crd-inferenceobjectives",
            _crd("inference.networking.x-k8s.io_inferenceobjectives.yaml"),
            ready_when=CRD_ESTABLISHED,
        ),
        # Made for the function's Envoy Gateway (its service account), never for another's.
        manifest(
            "envoy-gateway-inferencepool-reader",
            INFERENCE_POOL_READER_ROLE,
            inside="envoy-gateway",
        ),
        manifest(
            "envoy-gateway-inferencepool-reader-binding",
            INFERENCE_POOL_READER_BINDING,
            after=("envoy-gateway-inferencepool-reader",),
            inside="envoy-gateway",
        ),
        # Its crds/ (Gateway API's and Envoy Gateway's) by a Job (crd_job.py), never beside
        # another's Envoy Gateway.
        *crd_job_components("envoy-gateway", inside="envoy-gateway"),
        chart(
            "envoy-gateway",
            envoy_gateway_values,
            after=("gaie-crd-inferencepools", "envoy-gateway-inferencepool-reader-binding"),
            wait=True,
            crd_job=crd_job_key("envoy-gateway"),
        ),
        # Its CRDs are release-owned templates: beside another Envoy Gateway (and its AI
        # Gateway's CRDs), never installed.
        chart("ai-gateway-crds", {}, wait=True, inside="envoy-gateway"),
        chart(
            "ai-gateway",
            AI_GATEWAY_VALUES,
            # Its webhook's certificate is a cert-manager Certificate.
            after=("ai-gateway-crds", "envoy-gateway", "cert-manager"),
        ),
        # GPUs through DRA, discovered by node-feature-discovery.
        # Its namespace is made first, to carry the Pod Security label its worker needs; on a
        # cluster someone else runs it may be there already: taken up (its labels merged),
        # never deleted.
        manifest(
            "nfd-namespace",
            namespace(CHARTS["node-feature-discovery"].namespace, PRIVILEGED),
            inside="node-feature-discovery",
            left_on=frozenset({EXISTING}),
        ),
        *nfd_crds,
        chart(
            "node-feature-discovery",
            NFD_VALUES,
            after=("nfd-namespace",),
            crds=tuple(c.key for c in nfd_crds),
        ),
        manifest(
            "dra-driver-namespace",
            namespace(CHARTS["nvidia-dra-driver"].namespace, PRIVILEGED),
            inside="nvidia-dra-driver",
        ),
        manifest(
            "dra-driver-critical-pods-quota",
            CRITICAL_PODS_QUOTA,
            after=("dra-driver-namespace",),
            inside="nvidia-dra-driver",
        ),
        # Never rolled back to NVIDIA's line: its kubelet plugin cannot read the checkpoint the
        # maintained one wrote (dra-driver-nvidia-gpu 0.4.1 stamps nodeBootID into
        # /var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json, which nvidia-dra-driver-gpu
        # 25.12.0 then reports corrupted, and every prepare on the node fails). Once deployed on
        # the maintained line (0.4.0 on; NVIDIA's versions are YY.MM.P, 25.x and later), a
        # failed or stuck upgrade rolls back within it.
        *crd_job_components("nvidia-dra-driver", inside="nvidia-dra-driver"),
        chart(
            "nvidia-dra-driver",
            dra_driver_values,
            after=("dra-driver-critical-pods-quota",),
            # One minor: its kubelet plugin validates a checkpoint by re-encoding it (0.4.1
            # cmd/gpu-kubelet-plugin/checkpoint.go), so a field a later minor writes reads as
            # corrupted after a rollback, as nodeBootID did to 25.12.0 (stack SRE review). A bump
            # to the next minor widens this deliberately, once its checkpoint is read back.
            rolls_back_within=((0, 4, 0), (0, 5, 0)),
            crd_job=crd_job_key("nvidia-dra-driver"),
        ),
        # Where each GPU pool's probe claims its GPUs with admin access (function/serving/gpus.py).
        manifest(
            gpus.NAMESPACE_KEY,
            namespace(gpus.NAMESPACE, {gpus.ADMIN_ACCESS_LABEL: "true", **BASELINE}),
            after=("nvidia-dra-driver",),
        ),
        # GPU node health (function/serving/gpu_health.py): the reporter, what it may do, and the
        # one ConfigMap it writes, read back.
        *(
            manifest(key, body, after=(gpu_health.NAMESPACE_KEY,))
            for key, body in gpu_health.ACCESS.items()
        ),
        manifest(
            gpu_health.REPORTER_KEY,
            gpu_health.deployment(),
            # Its pod needs its service account; what it may do can come after (it tries again
            # every minute), and Usages for each would cost more than they order.
            after=(gpu_health.SERVICE_ACCOUNT_KEY,),
            ready_when=DEPLOYMENT_AVAILABLE,
        ),
        manifest(
            gpu_health.REPORT_KEY,
            gpu_health.report(),
            after=(gpu_health.NAMESPACE_KEY,),
            policies=OBSERVE,
        ),
        # GPU metrics (function/serving/gpu_metrics.py): the DCGM exporter on every GPU node; on
        # EKS a second release with its own host engine where the node monitoring agent runs none.
        *gpu_metrics_release(
            gpu_metrics.KEY, gpu_metrics.NAMESPACE_KEY, gpu_metrics.QUOTA_KEY, gpu_metrics_values
        ),
        *gpu_metrics_release(
            gpu_metrics.EMBEDDED_KEY,
            gpu_metrics.EMBEDDED_NAMESPACE_KEY,
            gpu_metrics.EMBEDDED_QUOTA_KEY,
            gpu_metrics_embedded_values,
            sources=EKS_ONLY,
            second_of=(gpu_metrics.KEY, gpu_metrics.EMBEDDED_NAMESPACE),
        ),
        # On a cluster someone else runs, whether any node took the kubelet plugin (its GPU nodes
        # are labelled and tainted by its operator, not by us).
        manifest(
            "dra-kubelet-plugin",
            DRA_KUBELET_PLUGIN,
            after=("nvidia-dra-driver",),
            inside="nvidia-dra-driver",
            sources=frozenset({EXISTING}),
            policies=OBSERVE,
        ),
        # The gateway's CA and certificates.
        manifest(
            "gateway-selfsigned-issuer",
            gateway.selfsigned_issuer(),
            after=("cert-manager", "gateway-namespace"),
        ),
        manifest(
            "gateway-ca-certificate",
            lambda ctx: gateway.ca_certificate(ctx.xr),
            after=("gateway-selfsigned-issuer",),
            ready_when=gateway.CERTIFICATE_READY,
        ),
        manifest("gateway-ca-issuer", gateway.ca_issuer(), after=("gateway-ca-certificate",)),
        manifest(
            "gateway-serving-certificate",
            lambda ctx: gateway.serving_certificate(ctx.hostname),
            after=("gateway-ca-issuer",),
            ready_when=gateway.CERTIFICATE_READY,
        ),
        manifest(
            "gateway-ca-bundle",
            gateway.ca_bundle(),
            after=("trust-manager", "gateway-ca-certificate"),
            ready_when=gateway.BUNDLE_SYNCED,
        ),
        manifest(
            "gateway-ca-configmap",
            gateway.ca_configmap(),
            after=("gateway-ca-bundle",),
            policies=OBSERVE,
        ),
        # The gateway itself, closed until an InferenceGateway can authenticate to it.
        manifest(
            "gateway-proxy",
            lambda ctx: gateway.envoy_proxy(ctx.load_balancer_annotations),
            after=("envoy-gateway", "gateway-namespace"),
        ),
        manifest("gateway-class", gateway.gateway_class(), after=("gateway-proxy",)),
        manifest(
            "gateway-client-cas",
            _client_cas,
            after=("gateway-namespace",),
        ),
        manifest(
            "gateway-client-auth",
            _when_clients(lambda _ctx: gateway.client_auth()),
            after=("envoy-gateway", "gateway-client-cas"),
            ready_when=gateway.POLICY_ACCEPTED,
        ),
        manifest(
            "gateway",
            _when_clients(lambda ctx: gateway.gateway(ctx.hostname)),
            # After the AI Gateway: its chart's mutating webhook for Envoy's proxy pods is
            # fail-closed (ai-gateway-helm v1.1.0), so the Gateway's first proxy pods wait for it
            # and get its sidecar.
            after=(
                "gateway-class",
                "gateway-serving-certificate",
                "gateway-client-cas",
                "ai-gateway",
            ),
            ready_when=gateway.GATEWAY_HAS_ADDRESS,
        ),
        # A cloud's load balancer outlives its cluster unless its Service goes first: deleting
        # the stack waits for it, so the cluster and its network are deleted after it.
        manifest(
            GATEWAY_LOAD_BALANCER,
            gateway.load_balancer(),
            after=("envoy-gateway",),
            watches=("gateway",),
            sources=PROVISIONED,
            policies=OBSERVE_DELETE,
        ),
        # Standard: multi-node engines as LeaderWorkerSets.
        *crd_job_components(
            "leader-worker-set", stacks=frozenset({STANDARD}), inside="leader-worker-set"
        ),
        chart(
            "leader-worker-set",
            LWS_VALUES,
            stacks=frozenset({STANDARD}),
            crd_job=crd_job_key("leader-worker-set"),
        ),
        own_budget("lws-disruption-budget", LWS_BUDGET, "leader-worker-set", STANDARD),
        # Dynamo: Grove, the KAI Scheduler and its queues, ModelExpress.
        chart("kai-scheduler", KAI_VALUES, stacks=frozenset({DYNAMO}), wait=True),
        *(
            own_budget(f"kai-disruption-budget-{app}", kai_budget(app), "kai-scheduler", DYNAMO)
            for app in KAI_BUDGETED
        ),
        chart("grove", GROVE_VALUES, after=("kai-scheduler",), stacks=frozenset({DYNAMO})),
        own_budget("grove-disruption-budget", GROVE_BUDGET, "grove", DYNAMO),
        manifest(
            "kai-queue-root",
            queue("modelplane-root", None),
            after=("kai-scheduler",),
            stacks=frozenset({DYNAMO}),
        ),
        manifest(
            "kai-queue",
            queue("modelplane", "modelplane-root"),
            after=("kai-queue-root",),
            stacks=frozenset({DYNAMO}),
        ),
        manifest(
            "modelexpress-crd-modelmetadatas",
            modelexpress_crds.model_metadata(),
            stacks=frozenset({DYNAMO}),
            ready_when=CRD_ESTABLISHED,
        ),
        manifest(
            "modelexpress-crd-modelcacheentries",
            modelexpress_crds.model_cache_entry(),
            stacks=frozenset({DYNAMO}),
            ready_when=CRD_ESTABLISHED,
        ),
        # The ModelExpress server in a namespace of its own (Pod Security baseline: its image
        # runs as root, nothing more), with a Role over that namespace alone.
        manifest(
            modelexpress.NAMESPACE_KEY,
            namespace(modelexpress.NAMESPACE, BASELINE),
            stacks=frozenset({DYNAMO}),
            # On a cluster someone else runs it may be there already: taken up, never deleted.
            left_on=frozenset({EXISTING}),
        ),
        *(
            manifest(
                f"modelexpress-{kind.lower()}",
                modelexpress.server(kind),
                after=(modelexpress.NAMESPACE_KEY, *MODELEXPRESS_CRDS),
                stacks=frozenset({DYNAMO}),
            )
            for kind in ("ServiceAccount", "Role", "RoleBinding", "Service")
        ),
        manifest(
            modelexpress.DEPLOYMENT_KEY,
            modelexpress.server("Deployment"),
            after=(
                "modelexpress-serviceaccount",
                "modelexpress-rolebinding",
                modelexpress.SERVICE_KEY,
            ),
            stacks=frozenset({DYNAMO}),
            ready_when=DEPLOYMENT_AVAILABLE,
        ),
        # What live clusters run in `default`, moved out (function/serving/modelexpress.py): the
        # Service becomes an alias of the new one once it serves, the rest goes after.
        *(
            manifest(
                key,
                modelexpress.server(kind, modelexpress.LEGACY_NAMESPACE),
                after=MODELEXPRESS_CRDS,
                stacks=frozenset({DYNAMO}),
                retired=modelexpress.legacy_access_retired,
            )
            for key, kind in zip(
                modelexpress.LEGACY_ACCESS_KEYS,
                ("ServiceAccount", "Role", "RoleBinding"),
                strict=True,
            )
        ),
        manifest(
            modelexpress.LEGACY_SERVICE_KEY,
            lambda ctx: modelexpress.legacy_service(ctx.moved),
            # Deleted with the XR before the Service it points at.
            after=(*MODELEXPRESS_CRDS, modelexpress.SERVICE_KEY),
            stacks=frozenset({DYNAMO}),
            retired=_never,
        ),
        manifest(
            modelexpress.LEGACY_DEPLOYMENT_KEY,
            modelexpress.server("Deployment", modelexpress.LEGACY_NAMESPACE),
            after=(
                "modelexpress-server-serviceaccount",
                "modelexpress-server-rolebinding",
                modelexpress.LEGACY_SERVICE_KEY,
            ),
            stacks=frozenset({DYNAMO}),
            ready_when=DEPLOYMENT_AVAILABLE,
            retired=modelexpress.legacy_server_retired,
        ),
    )


COMPONENTS: tuple[Component, ...] = table()
# Each component's composed resource key, by component key (what `after` names).
RESOURCE_KEYS = {c.key: c.resource_key for c in COMPONENTS}
