"""Source GKE: a VPC-native regional GKE cluster with private nodes, GPU node pools and the
Filestore CSI driver, as namespaced provider-upjet-gcp resources.

The project comes from the GCP ProviderConfig the credentials name (fetched as a required
resource): Workload Identity, the service accounts and their IAM grants need it. GKE's kubeconfig
carries no user credentials, and the GCP ProviderConfig's own credentials may be an injected
identity or impersonation that no other provider can borrow; so the cluster gets an identity of
its own: a service account with `roles/container.admin` and a key (rotated before 90 days:
GKECluster.access_keys), whose connection Secret the ProviderConfigs reaching the cluster use as
GoogleApplicationCredentials (provider-kubernetes v1.3.1 and provider-helm (v1.3.0 and v1.4.0)
read the JSON key from the Secret key they are given; provider-upjet-gcp writes it decoded under
`private_key`).

GPU pools follow GKE's DRA guide ("Prepare GKE infrastructure for DRA workloads"): GKE's driver
installation and device plugin are off, and the COS driver-installer DaemonSet GKE documents
installs the driver, so the NVIDIA DRA driver is the only allocator of the GPUs.
"""

import copy
import functools
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta

from function import clock, kube, names, shapes
from function.clusters import calendars, gke_driver, rollout
from function.clusters.base import (
    NO_LATE_INIT,
    PROVIDER_CONFIG_KEYS,
    SYSTEM_LABELS,
    SYSTEM_NODES,
    Cloud,
    Minor,
    Pool,
    Scaling,
    minor,
    observed_reason,
    pool_labels,
    text,
)
from function.clusters.facts import ClusterFacts
from function.failures import failure
from function.inputs import ObservedResource, is_true
from function.models import GKE
from function.providerconfigs import Identity, SecretKey

CONTAINER = "container.gcp.m.upbound.io/v1beta1"
COMPUTE = "compute.gcp.m.upbound.io/v1beta1"
CLOUDPLATFORM = "cloudplatform.gcp.m.upbound.io/v1beta1"
STORAGE_CLASS = "modelplane-rwx"
# Filestore's zonal tier: 1 TiB minimum per volume and 260 MiB/s of reads per TiB (Filestore
# "Service tiers"); enterprise is regional, which a cache that can be downloaded again does not
# need, and basic HDD reads at 100 MiB/s.
FILESTORE_TIER = "zonal"
# GPU pools upgrade one node at a time with no extra node: a surge node is one more 8-GPU machine,
# which quota or capacity often refuses, stalling the upgrade (GKE "Surge upgrades": maxSurge 0
# with maxUnavailable 1 upgrades in place, a node down at a time).
GPU_UPGRADE = {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}
# GKE cost allocation: the cluster's costs broken down by namespace and label in the Cloud Billing
# export, by what pods request. No charge, and it changes in place (GKE "Get key spending
# insights for your GKE cluster resources": `clusters update --enable-cost-allocation`;
# ClusterUpdate desiredCostManagementConfig). GPUs claimed through DRA are not requests: their
# nodes' cost likely shows as unallocated (not verified).
COST_ALLOCATION = {"enabled": True}
# The REGULAR channel upgrades the control plane and every node pool on GKE's schedule, at any hour
# without a maintenance window (GKE "Maintenance windows and exclusions"): each GPU node drained in
# turn on a working day. Automatic upgrades wait for the weekend nights (UTC) instead: 8 hours on
# Saturday and on Sunday, over the 48 hours in any 32 days GKE requires and 4 hours at a time.
# What the spec asks for (a version step) is not held to the window.
MAINTENANCE_WINDOW = {
    "recurringWindow": {
        "startTime": "2026-01-03T00:00:00Z",  # a Saturday
        "endTime": "2026-01-03T08:00:00Z",
        "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
    }
}
# Filestore volumes stay Pending until the project has the API (a ProjectService never disables
# it again: other clusters of the project may use it).
FILESTORE_API = "file.googleapis.com"
# Cloud NAT ports per node (cloud.google.com/nat/docs/ports-and-addresses): by default every VM
# gets 64 ports per destination address and port, and new connections beyond them are dropped
# (OUT_OF_RESOURCES), which an 8-GPU node pulling image layers and model weights in parallel from
# one registry address reaches. Dynamic port allocation grows a busy VM's share from 128 to 4096
# (powers of two, the minimum at least 32) and gives idle ones back; it requires endpoint-
# independent mapping off. AUTO_ONLY adds NAT addresses as VMs need more ports (each holds
# 64,512). All four change in place on a live RouterNAT (google_compute_router_nat: none forces
# a new one).
NAT_PORTS = {
    "enableDynamicPortAllocation": True,
    "enableEndpointIndependentMapping": False,
    "minPortsPerVm": 128,
    "maxPortsPerVm": 4096,
}
# Cloud NAT says nothing of a dropped connection unless it logs: errors only, the connections it
# could not translate (OUT_OF_RESOURCES and the like), billed as Cloud Logging entries, which a
# NAT that has its ports writes none of (cloud.google.com/nat/docs/monitoring: ERRORS_ONLY).
NAT_LOGS = {"enable": True, "filter": "ERRORS_ONLY"}
# GKE Dataplane V2 (Cilium, eBPF): Kubernetes NetworkPolicy is always enforced, with no Calico
# add-on to install or run (GKE "GKE Dataplane V2"), so networkPolicy stays unset (GKE "Use GKE
# Dataplane V2": enforcement is built in, and the network policy option is off beside it). Chosen
# at creation only (terraform-provider-google v7.39.0 datapath_provider ForceNew; the same page:
# enabled when creating new clusters), so a cluster made before keeps its dataplane
# (function/forcenew.py) and the XR says so.
DATAPATH = "ADVANCED_DATAPATH"
# The COS driver installer puts the NVIDIA driver here; the DRA driver must be told.
NVIDIA_DRIVER_ROOT = gke_driver.INSTALL_DIR
DRIVER_INSTALLER_KEY = "nvidia-driver-installer"
# Every installer pod scheduled is ready (none scheduled while the GPU pools have no node).
INSTALLED = (
    "has(object.status) && has(object.status.desiredNumberScheduled)"
    " && has(object.status.numberReady)"
    " && object.status.numberReady == object.status.desiredNumberScheduled"
)
# GKE's DRA guide: no GKE driver and no GKE device plugin on DRA node pools; the DRA driver's
# kubelet plugin schedules on nodes labelled nvidia.com/gpu.present=true (its chart's affinity).
DRA_NODE_LABELS = {
    "gke-no-default-nvidia-gpu-device-plugin": "true",
    "nvidia.com/gpu.present": "true",
}
NO_GKE_DRIVER = {"gpuDriverVersion": "INSTALLATION_DISABLED"}
# The identity that reaches the cluster (Kubernetes API through IAM) and the nodes' own, least
# privilege (GKE "Configure node service accounts": the default node role, plus image pulls).
ACCESS_ROLE = "roles/container.admin"
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")
# provider-upjet-gcp writes the decoded JSON key of a ServiceAccountKey under this key.
KEY_SECRET_KEY = "private_key"  # noqa: S105 - the name of a key in a Secret
# The access key rotates (CIS GCP 1.7: user-managed keys rotated within 90 days). Its successor is
# made at 75 days, by the key's own validAfter (the IAM API's validAfterTime, its creation:
# terraform-provider-google resource_google_service_account_key.go), or at 5/6 of a shorter life
# an organisation policy gives keys (iam.serviceAccountKeyExpiryHours, validBefore): 15 days for
# the successor to be made and Ready, the ProviderConfigs to move and the old key to go, through
# a provider or API outage, before the key is 90 days old. Resource keys `access-key` (the first
# key, as live clusters have it), then `access-key-2`, `access-key-3`...; at most two at a time.
KEY = "access-key"
KEY_MAX_AGE = timedelta(days=90)
KEY_ROTATES_AFTER = timedelta(days=75)
IDENTITY_TYPE = "GoogleApplicationCredentials"
# GCP ProviderConfig sources that hold no key. The cluster's ProviderConfigs then take the
# providers' own Google identity (application default credentials: provider-kubernetes v1.3.1
# pkg/kube/client/gke.WrapRESTConfig with no credentials), which the operator gives
# provider-kubernetes and provider-helm as the GCP provider has its own (docs/clouds/gke.md).
KEYLESS_SOURCES = frozenset({"InjectedIdentity", "ImpersonateServiceAccount"})
INJECTED = Identity(IDENTITY_TYPE, None)
# 1.<minor>, then anything (a patch, a GKE build).
IMAGE = "COS_CONTAINERD"
SYSTEM_MACHINE_TYPE = "e2-standard-4"
# A regional cluster without node locations runs a pool in (usually) three zones.
DEFAULT_ZONES = 3
NODE_CIDR = "10.0.0.0/20"
POD_CIDR = "10.4.0.0/14"
SERVICE_CIDR = "10.8.0.0/20"
MASTER_CIDR = "172.16.0.0/28"
# The ports the stack's fail-closed admission and conversion webhooks serve on, each with where it
# comes from at the pinned version. The cluster's nodes are private: the only firewall rule GKE
# makes from the control plane range admits TCP 443 and 10250 (GKE "Automatically created firewall
# rules", gke-<cluster>-<hash>-master), and the API server calls a webhook on its pod's IP and
# container port. cert-manager v1.20.2's webhook serves on 10250 (values.yaml webhook.securePort)
# for that very reason, so it needs nothing here. tests/test_webhook_ports.py renders every chart
# with the function's values and holds this table to exactly what the webhooks need.
WEBHOOK_PORTS: dict[int, tuple[str, ...]] = {
    6443: (
        # Every Bundle write (the gateway's CA is one): templates/webhook.yaml, its Service's
        # targetPort.
        "trust-manager v0.24.0 values.yaml app.webhook.port",
    ),
    9443: (
        # Every pod Envoy Gateway manages: templates/admission_webhook.yaml, through the
        # Service's mutating-webhook port to the controller's container port.
        "ai-gateway-helm v1.1.0 values.yaml controller.mutatingWebhook.port, "
        "controller.service.ports",
        # LeaderWorkerSets and their pods, and the LeaderWorkerSet CRD's conversion webhook:
        # lws-webhook-service's targetPort, the manager's webhook-server container port.
        "lws v0.8.0 templates/webhook/service.yaml, values.yaml service.port",
        # PodCliqueSets and ClusterTopologies (Dynamo).
        "grove-charts v0.1.0-alpha.11 values.yaml config.server.webhooks.port",
        # Pods (KAI's admission), PodGroups and Queues (Dynamo), whose webhooks the operator
        # makes at run time (pkg/operator/operands/{admission,pod_group_controller,
        # queue_controller}/resources.go at the tag).
        "kai-scheduler v0.16.8 values.yaml admission.ports.webhookPort; pkg/apis/kai/v1 "
        "pod_group_controller and queue_controller, Webhook.TargetPort's default",
    ),
}
# GCP's default priority, GKE's own rules' (the network has no deny rule to outrank); no logging:
# every webhook call would be a billed Cloud Logging entry (VPC "Firewall Rules Logging").
FIREWALL_PRIORITY = 1000
# GKE's own GPU taint; set explicitly so every GPU pool has exactly it, never a second one.
GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
OAUTH = ["https://www.googleapis.com/auth/cloud-platform"]


class GKECluster:
    def __init__(self, cloud: Cloud, settings: GKE) -> None:
        self.cloud = cloud
        self.region = settings.region
        self.version = settings.kubernetes_version
        self.cluster_name = cloud.name("gke", limit=40)
        self.labels = {"modelplane-ai-cluster": names.cloud_name(cloud.xr)}
        self.key_secret = names.child_name(cloud.xr, "gcp-access-key")
        self.pool_members: list[rollout.Member] = []
        # The access keys observed, by generation (only their names are gone through: a
        # resource read is one the kept composition depends on).
        observed = cloud.inputs.observed.resources
        self.keys_seen = {
            generation: observed[key]
            for key in observed
            if key.startswith(KEY) and (generation := key_generation(key)) is not None
        }

    def render(self) -> ClusterFacts:
        c = self.cloud
        config = c.cloud_provider_config("gcp.m.upbound.io")
        project = (config.spec or {}).get("projectID")
        if config.answered and not project and c.observed("cluster") is None:
            message = (
                f"GCP {config.describe} not found or has no projectID; the GKE cluster needs "
                "its project for Workload Identity and waits for it"
            )
            c.warn(message, reason="ProviderConfigNotFound")
        pools = c.pools("GKE", "gke")
        calendars.check(c, calendars.GKE, self.version)
        keyless = self.keyless(config)
        self.network()
        self.project_service(project)
        self.service_account("node", NODE_ROLES, project)
        self.node_account = self.email("node", project) if project else None
        identity, key_ready = (INJECTED, True) if keyless else self.access_key(project)
        self.moving = self.rollout(pools)
        self.control_plane(project)
        self.system_pool()
        for pool in pools:
            self.node_pool(pool)
        provider_config = c.provider_configs(c.is_ready("cluster") and key_ready, identity)
        self.driver_installer(provider_config)
        storage_class = self.storage_class(provider_config)
        facts = c.facts(provider_config, storage_class)
        facts.nvidia_driver_root = NVIDIA_DRIVER_ROOT
        facts.nvidia_driver_installers = (DRIVER_INSTALLER_KEY,)
        return facts

    def keyless(self, config) -> bool:
        """Whether the cluster is reached without a key: the GCP ProviderConfig holds no key
        (InjectedIdentity, impersonation), so organisations that forbid keys
        (iam.disableServiceAccountKeyCreation) can run it. A cluster composed with a key keeps
        it: a changed ProviderConfig never removes what reaches a running stack."""
        c = self.cloud
        if self.keys_seen or c.observed("access-service-account") is not None:
            return False
        remembered = c.remembered_identity()
        if remembered is not None and remembered.secret is None:
            return True
        credentials = (config.spec or {}).get("credentials") or {}
        return credentials.get("source") in KEYLESS_SOURCES

    def access_key(self, project: str | None) -> tuple[Identity, bool]:
        """The access account, its grant and its keys (rotated: access_keys); the identity the
        ProviderConfigs take from a key's Secret, and whether that key and its grant are ready."""
        c = self.cloud
        self.service_account("access", (ACCESS_ROLE,), project)
        keys = self.access_keys()
        for generation in keys.composed:
            self.key(generation, waits=generation <= keys.use)
        made = [key_resource(g) for g in keys.composed if key_resource(g) in c.resources]
        # The stack uninstalls through the key the ProviderConfigs hold; its Usages go by
        # `access-key` whichever key that is, and move to the next key in place (usages.Anchor).
        c.anchors = ((key_resource(keys.anchor), KEY),)
        # Each key goes before its grant and the cluster; a successor outlives the key before it,
        # which outlives the stack while the ProviderConfigs may still hold it.
        for key in made:
            c.outlives += [("cluster", key), ("access-iam-member-0", key)]
        c.outlives += [(newer, older) for older, newer in itertools.pairwise(made)]
        identity = Identity(IDENTITY_TYPE, SecretKey(self.secret(keys.use), KEY_SECRET_KEY))
        if not keys.ready:  # ProviderConfigs made with another identity keep it until then
            return c.remembered_identity() or identity, False
        return identity, True

    def access_keys(self) -> "Keys":
        """Which access keys are composed, and which one the ProviderConfigs take, from what is
        observed alone (the keys, their age, the Secret each ProviderConfig names, the Usages):

        1. the key both ProviderConfigs are observed on reaches its rotation age: its successor
           is composed, and the ProviderConfigs keep the key they have;
        2. the successor is Ready with its Secret written (and the grant Ready): both
           ProviderConfigs move to it; the older key still outlives the stack;
        3. both ProviderConfigs are observed on it: the stack's Usages move to it;
        4. no observed Usage names the older key any more: it goes.

        A key observed, or named by an observed ProviderConfig, is always composed: an
        observation missing for a moment drops nothing, and a successor that fails keeps the
        ProviderConfigs where they are (the XR says why)."""
        c = self.cloud
        seen = self.keys_seen
        held = [self.secret_generation(c.observed(k)) for k in PROVIDER_CONFIG_KEYS]
        in_use = {g for g in held if g is not None}
        on = held[0] if len(in_use) == 1 and None not in held else None
        composed = set(seen) | in_use or {1}
        newest = max(composed)
        if on == newest and newest in seen and rotation_due(seen[newest]):
            composed.add(newest + 1)
        grant = c.is_ready("access-iam-member-0")
        usable = {g for g in composed if grant and g in seen and key_usable(seen[g])}
        use = max(usable | in_use, default=max(composed))
        if on is not None:
            composed -= {g for g in composed if g < on and not self.kept_by_usages(g)}
        self.warn_rotation(sorted(composed), use, usable)
        # The stack's Usages keep the key both ProviderConfigs are observed on; otherwise the
        # oldest key, which every newer one outlives.
        anchor = on if on is not None else min(composed)
        return Keys(tuple(sorted(composed)), use, use in usable | in_use, anchor)

    def kept_by_usages(self, generation: int) -> bool:
        """Whether an observed Usage still names the key as what it keeps (it may go only once
        the Usages have moved to its successor: Crossplane refuses to delete what a Usage
        names)."""
        c, name = self.cloud, self.key_name(generation)
        return any(
            c.observed(key).get("spec", "of", "resourceRef", "name") == name
            for key in c.inputs.observed.resources
            if key.startswith(f"usage-{KEY}")
        )

    def warn_rotation(self, composed: list[int], use: int, usable: set[int]) -> None:
        """Why the ProviderConfigs stay on a key while its successor exists: the provider reports
        the successor failing, or the key in use is past 90 days."""
        c = self.cloud
        for generation in (g for g in composed if g > use and g in self.keys_seen):
            successor = self.keys_seen[generation]
            if generation in usable:
                continue
            why = failure(successor)
            held = self.keys_seen.get(use)
            made = key_made(held) if held is not None else None
            late = made is not None and clock.reached(made + KEY_MAX_AGE)
            if not (why or late):
                continue
            because = why or observed_reason(successor) or "not Ready"
            age = " is over 90 days old (CIS GCP 1.7) and" if late else ""
            c.warn(
                f"access key rotation: {key_resource(use)}{age} stays in use by the cluster's "
                f"ProviderConfigs until its successor {key_resource(generation)} is Ready with "
                f"its Secret written; {key_resource(generation)}: {because}",
                reason="AccessKeyRotation",
            )

    def key_name(self, generation: int) -> str:
        c = self.cloud
        return c.name(KEY) if generation == 1 else c.name(KEY, str(generation))

    def secret(self, generation: int) -> str:
        """The key's connection Secret, one per key: a ProviderConfig moves to a Secret written
        whole, never to one being rewritten."""
        return self.key_secret if generation == 1 else f"{self.key_secret}-{generation}"

    def secret_generation(self, provider_config: ObservedResource | None) -> int | None:
        """The key whose Secret an observed ProviderConfig names, if one of them."""
        ref = provider_config.get("spec", "identity", "secretRef") if provider_config else None
        name = ref.get("name") if isinstance(ref, dict) else None
        if not isinstance(name, str):
            return None
        if name == self.key_secret:
            return 1
        tail = name.removeprefix(f"{self.key_secret}-")
        return int(tail) if tail != name and is_generation(tail) else None

    def mr(self, key: str, api: str, kind: str, name: str, for_provider: dict, **kw) -> dict:
        return self.cloud.managed(key, api, kind, name, for_provider, **kw)

    def network(self) -> None:
        c = self.cloud
        network = {"networkRef": {"name": c.name("vpc")}}
        self.mr(
            "network",
            COMPUTE,
            "Network",
            c.name("vpc"),
            {"autoCreateSubnetworks": False, "routingMode": "REGIONAL"},
        )
        self.mr(
            "subnetwork",
            COMPUTE,
            "Subnetwork",
            c.name("nodes"),
            {
                "region": self.region,
                **network,
                "ipCidrRange": NODE_CIDR,
                "privateIpGoogleAccess": True,
                "secondaryIpRange": [
                    {"rangeName": "pods", "ipCidrRange": POD_CIDR},
                    {"rangeName": "services", "ipCidrRange": SERVICE_CIDR},
                ],
            },
        )
        self.webhook_firewall()
        # Private nodes reach registries and model hubs through Cloud NAT.
        self.mr("router", COMPUTE, "Router", c.name("router"), {"region": self.region, **network})
        self.mr(
            "router-nat",
            COMPUTE,
            "RouterNAT",
            c.name("nat"),
            {
                "region": self.region,
                "routerRef": {"name": c.name("router")},
                "natIpAllocateOption": "AUTO_ONLY",
                "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
                **NAT_PORTS,
                "logConfig": dict(NAT_LOGS),
            },
        )

    def webhook_firewall(self) -> None:
        """The control plane's path to the stack's fail-closed webhooks (WEBHOOK_PORTS), on every
        node of the cluster's own network: GKE's node tags are not known before its pools exist,
        and nothing but this cluster's nodes runs on the network. A network that still has firewall
        rules cannot be deleted; GCP refuses and the provider retries until this rule is gone,
        which deletes with nothing else (no reference is resolved for a deletion), so no Usage."""
        c = self.cloud
        self.mr(
            "webhook-firewall",
            COMPUTE,
            "Firewall",
            names.cloud_name(c.xr, "webhooks", letter_first=True),
            {
                "networkRef": {"name": c.name("vpc")},
                "description": "Modelplane: the control plane to the stack's admission webhooks",
                "direction": "INGRESS",
                "priority": FIREWALL_PRIORITY,
                "sourceRanges": [MASTER_CIDR],
                "allow": [{"protocol": "tcp", "ports": [str(p) for p in sorted(WEBHOOK_PORTS)]}],
            },
        )

    # --- the project's API, the service accounts and the cluster's identity -----------------------

    def sa_name(self, role: str) -> str:
        """A service account id: 6 to 30 characters, a letter first."""
        return names.cloud_name(self.cloud.xr, role, limit=30, letter_first=True)

    def email(self, role: str, project: str) -> str:
        return f"{self.sa_name(role)}@{project}.iam.gserviceaccount.com"

    def project_service(self, project: str | None) -> None:
        def build(project: str) -> None:
            self.mr(
                "filestore-api",
                CLOUDPLATFORM,
                "ProjectService",
                self.cloud.name("file-api"),
                {
                    "project": project,
                    "service": FILESTORE_API,
                    "disableOnDestroy": False,
                    "disableDependentServices": False,
                },
            )

        self.cloud.keep_or_build("filestore-api", {"project": project}, build, "the GCP project id")

    def service_account(self, role: str, grants: tuple[str, ...], project: str | None) -> None:
        """A dedicated service account and its project-level roles."""
        c = self.cloud
        name = self.sa_name(role)

        def account(project: str) -> None:
            display = f"Modelplane {role} of {c.xr}"[:100]
            self.mr(
                f"{role}-service-account",
                CLOUDPLATFORM,
                "ServiceAccount",
                name,
                {"project": project, "displayName": display},
            )

        def grant(i: int, project: str) -> None:
            self.mr(
                f"{role}-iam-member-{i}",
                CLOUDPLATFORM,
                "ProjectIAMMember",
                c.name(role, grants[i].removeprefix("roles/")),
                {
                    "project": project,
                    "role": grants[i],
                    "member": f"serviceAccount:{self.email(role, project)}",
                },
            )

        waits = "the GCP project id"
        c.keep_or_build(f"{role}-service-account", {"project": project}, account, waits)
        for i in range(len(grants)):
            build = functools.partial(grant, i)
            c.keep_or_build(f"{role}-iam-member-{i}", {"project": project}, build, waits)

    def key(self, generation: int, waits: bool = True) -> None:
        """One of the access account's JSON keys, written to a Secret of its own. A successor
        the ProviderConfigs do not hold yet does not wait (waits=False): the cluster stays as
        ready as the key in use keeps it while the next one is made (a failing one is said by
        AccessKeyRotation)."""
        c = self.cloud
        key = key_resource(generation)
        if not c.when(key, "access-service-account" in c.resources, "the service account"):
            return
        body = self.mr(
            key,
            CLOUDPLATFORM,
            "ServiceAccountKey",
            self.key_name(generation),
            {
                "serviceAccountIdRef": {"name": self.sa_name("access")},
                "privateKeyType": "TYPE_GOOGLE_CREDENTIALS_FILE",
            },
            connection_secret=self.secret(generation),
        )
        if not waits:
            c.add(key, body, ready=True)

    # --- the control plane and the node pools ----------------------------------------------------

    def master_version(self) -> str | None:
        seen = self.cloud.observed("cluster")
        version = seen.at_provider("masterVersion") if seen else None
        return version if isinstance(version, str) and version else None

    def control_plane_version(self) -> str:
        """The spec's version, or the next minor on the way to it: GKE upgrades a control plane
        one minor version at a time (GKE "Manually upgrading a cluster or node pool"), and the
        next step waits until every pool runs the minor the control plane runs (rollout)."""
        seen = self.master_version()
        if seen is None:  # not observed: hold what the control plane was asked for, if anything
            return self.seen("cluster", "minMasterVersion") or self.version
        want, have = minor(self.version), minor(seen)
        if want is not None and have is not None and want > have and self.lagging(have):
            return self.seen("cluster", "minMasterVersion") or text(have)
        if want is None or have is None or want <= (have[0], have[1] + 1):
            if want is not None and have is not None and want < have:
                self.cloud.warn(
                    f"spec.cluster.gke.kubernetesVersion {self.version} is older than the control "
                    f"plane's {seen}: GKE moved the cluster past it (an automatic upgrade, at the "
                    "latest at the end of the minor's support) or the spec was lowered; GKE "
                    f"cannot downgrade a control plane, so it stays; set {text(have)} or newer",
                    reason="VersionDowngrade",
                )
            return self.version
        step = text((have[0], have[1] + 1))
        self.cloud.warn(
            f"spec.cluster.gke.kubernetesVersion {self.version}: the control plane is at {seen} "
            f"and GKE upgrades one minor version at a time; upgrading to {step} first",
            reason="UpgradingStepwise",
        )
        return step

    def members(self, pools: list[Pool]) -> list[rollout.Member]:
        """The system pool and each GPU pool, as the rollout sees them."""
        c = self.cloud
        keys = [("system-nodepool", False)] + [(f"nodepool-{p.name}", True) for p in pools]
        return [
            rollout.Member(
                key,
                gpu=gpu,
                exists=c.observed(key) is not None,
                asked=minor(self.seen(key, "version")),
                runs=minor(c.observed(key).at_provider("version") if c.observed(key) else None),
                ready=c.is_ready(key),
            )
            for key, gpu in keys
        ]

    def rollout(self, pools: list[Pool]) -> frozenset[str]:
        """The pools that ask for the control plane's version this reconcile: after a minor step
        the spec asked for, the system pool, then the GPU pools one at a time. Otherwise none
        (after GKE's own minor step too): GKE's auto-upgrade moves the pools to each patch of the
        control plane, inside the maintenance window and its exclusions."""
        have = minor(self.master_version())
        if have is None:
            return frozenset()
        self.pool_members = self.members(pools)
        want = minor(self.version)
        if want is not None and want < have:
            # GKE moved the control plane past the spec itself: its auto-upgrade moves the pools
            # too, inside the maintenance window and its exclusions, where a version the
            # function set would be a manual upgrade, which ignores both (GKE "About Standard
            # cluster upgrades").
            return frozenset()
        if not any(lags(m, have) for m in self.pool_members):
            return frozenset()
        moving = rollout.movers(self.pool_members, have)
        rollout.say(self.cloud, self.pool_members, have, moving)
        # A pool there lets go of the version again.
        return frozenset(
            m.key for m in self.pool_members if m.key in moving and not rollout.done(m, have)
        )

    def lagging(self, have: Minor) -> bool:
        """Whether an observed pool reports a minor other than the control plane's."""
        return any(lags(m, have) for m in self.pool_members)

    def control_plane(self, project: str | None) -> None:
        c = self.cloud
        node_account = "node-service-account"

        def build(project: str, node_account_ready: bool) -> None:
            del node_account_ready
            self.mr(
                "cluster",
                CONTAINER,
                "Cluster",
                self.cluster_name,
                {
                    "location": self.region,
                    "minMasterVersion": self.control_plane_version(),
                    "releaseChannel": {"channel": "REGULAR"},
                    "maintenancePolicy": copy.deepcopy(MAINTENANCE_WINDOW),
                    "deletionProtection": False,
                    # The default pool is replaced by the pools below.
                    "removeDefaultNodePool": True,
                    "initialNodeCount": 1,
                    "networkRef": {"name": c.name("vpc")},
                    "subnetworkRef": {"name": c.name("nodes")},
                    "networkingMode": "VPC_NATIVE",
                    "datapathProvider": DATAPATH,
                    "ipAllocationPolicy": {
                        "clusterSecondaryRangeName": "pods",
                        "servicesSecondaryRangeName": "services",
                    },
                    "privateClusterConfig": {
                        "enablePrivateNodes": True,
                        "enablePrivateEndpoint": False,
                        "masterIpv4CidrBlock": MASTER_CIDR,
                    },
                    "workloadIdentityConfig": {"workloadPool": f"{project}.svc.id.goog"},
                    "addonsConfig": {"gcpFilestoreCsiDriverConfig": {"enabled": True}},
                    "resourceLabels": self.labels,
                    "costManagementConfig": {**COST_ALLOCATION},
                },
                # The default pool's nodes run as the node account too, while they last. A node
                # account is immutable (a change would make upjet refuse to update), so it is
                # given at creation only and never changes a cluster or pool composed before.
                init_provider={"nodeConfig": {"serviceAccount": self.email("node", project)}},
                connection_secret=names.kubeconfig_secret(c.xr),
            )

        ready = True if c.is_ready(node_account) else None
        c.keep_or_build(
            "cluster",
            {"project": project, "node_account_ready": ready},
            build,
            "the GCP project id and the node service account",
        )

    def node_pool_mr(
        self,
        key: str,
        name: str,
        node_config: dict,
        zones: list[str],
        size: Scaling,
        upgrade: dict | None = None,
    ) -> None:
        """A regional node pool as GKE sizes it: node counts are per zone, autoscaling limits
        are totals. Its nodes run as the node account and follow the control plane's version."""
        c = self.cloud
        ready = "cluster" in c.resources and self.node_account is not None
        if not c.when(key, ready, "the cluster and the node service account"):
            return
        for_provider: dict = {
            "clusterRef": {"name": self.cluster_name},
            "location": self.region,
            # GKE's auto-upgrade moves the nodes to the control plane's version inside the
            # maintenance window and its exclusions (GKE "Standard cluster upgrades"; a release
            # channel keeps it on anyway). The version is set only while a minor step of the
            # control plane reaches the pools (below): the NodePool CRD calls setting both
            # "highly discouraged", as they "will fight".
            "management": {"autoRepair": True, "autoUpgrade": True},
            "nodeConfig": {
                "imageType": IMAGE,
                "oauthScopes": OAUTH,
                "workloadMetadataConfig": {"mode": "GKE_METADATA"},
                **node_config,
            },
        }
        # Only a pool whose turn has come in a minor step asks for the control plane's exact
        # version (a minor alone would differ from the build the provider reads back on every
        # sync: terraform-provider-google's "spurious diffs" of fuzzy versions). Otherwise the
        # version is left out: it is Optional and Computed, so the provider keeps what GKE runs
        # and asks for no update, and with LateInitialize off it is never written back into
        # forProvider. While the control plane's version is not observed a pool keeps what it
        # asks for.
        master = self.master_version()
        version = master if key in self.moving else None
        if master is None:
            version = self.seen(key, "version")
        if version:
            for_provider["version"] = version
        if upgrade:
            for_provider["upgradeSettings"] = dict(upgrade)
        init_provider = None
        if size.autoscaling:
            count = len(zones) or DEFAULT_ZONES
            for_provider["autoscaling"] = {
                "totalMinNodeCount": size.minimum,
                "totalMaxNodeCount": size.maximum,
                "locationPolicy": "ANY",
            }
            init_provider = {"initialNodeCount": initial_per_zone(size, count)}
            if zones:
                for_provider["nodeLocations"] = zones
        elif zones:
            locations = fixed_locations(zones, size.initial)
            for_provider["nodeLocations"] = locations
            for_provider["nodeCount"] = size.initial // len(locations)
        else:
            # Unknown zones (the cluster's defaults): totals hold the pool at its size, and the
            # autoscaler removes the surplus of a first node per zone once it is empty.
            for_provider["autoscaling"] = {
                "totalMinNodeCount": size.initial,
                "totalMaxNodeCount": size.initial,
                "locationPolicy": "ANY",
            }
            init_provider = {"initialNodeCount": -(-size.initial // DEFAULT_ZONES)}
        # Given at creation only, as the cluster's (immutable).
        account = self.node_account or self.seen(
            key, "nodeConfig", "serviceAccount", block="initProvider"
        )
        if account:
            init_provider = (init_provider or {}) | {"nodeConfig": {"serviceAccount": account}}
        c.managed(
            key,
            CONTAINER,
            "NodePool",
            name,
            for_provider,
            init_provider=init_provider,
            policies=NO_LATE_INIT,
        )

    def seen(self, key: str, *path: str, block: str = "forProvider") -> str | None:
        """A string of an observed resource's spec.forProvider (or another block), if any."""
        seen = self.cloud.observed(key)
        value = seen.get("spec", block, *path) if seen else None
        return value if isinstance(value, str) and value else None

    def system_pool(self) -> None:
        c = self.cloud
        self.node_pool_mr(
            "system-nodepool",
            c.name("system", limit=40),
            {"machineType": SYSTEM_MACHINE_TYPE, "diskSizeGb": 100, "labels": SYSTEM_LABELS},
            [],
            Scaling(*SYSTEM_NODES, autoscaling=True),
        )

    def node_pool(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        self.check_shape(pool)
        size = c.sizes(pool, "GKE")
        if size.autoscaling:
            size = Scaling(size.minimum, max(size.maximum, 1), size.initial, autoscaling=True)
        zones = pool.spec.zones
        used = zones if size.autoscaling or not zones else fixed_locations(zones, size.initial)
        if len(used) < len(zones):
            c.warn(
                f"pool {pool.name!r}: {size.initial} nodes do not split evenly over "
                f"{len(zones)} zones (GKE counts a fixed pool's nodes per zone); it runs "
                f"{size.initial // len(used)} in each of {', '.join(used)}",
                reason="PoolZonesNarrowed",
            )
        labels = pool_labels(pool, shape.accelerator.type) | DRA_NODE_LABELS
        self.node_pool_mr(
            f"nodepool-{pool.name}",
            c.name("np", pool.name, limit=40),
            {
                "machineType": shape.machine_type,
                "diskSizeGb": shape.disk_size_gb,
                "labels": labels,
                "taint": [GKE_GPU_TAINT],
                "gvnic": {"enabled": True},
                "guestAccelerator": [
                    {
                        "type": shape.accelerator.type,
                        "count": shape.accelerator.count,
                        "gpuDriverInstallationConfig": NO_GKE_DRIVER,
                    }
                ],
            },
            pool.spec.zones,
            size,
            upgrade=GPU_UPGRADE,
        )

    def check_shape(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        accelerator = shape.accelerator
        where = f"pool {pool.name!r} (class {pool.cls.name!r}, {shape.machine_type})"
        machines = shapes.GKE_ACCELERATORS.get(accelerator.type)
        attachable = shapes.GKE_ATTACHABLE.get(accelerator.type)
        if not pool.spec.zones:
            c.warn(
                f"{where}: no zones; GKE spreads the pool over the region's zones, and "
                f"{accelerator.type} may not be offered in all of them",
                reason="PoolWithoutZones",
            )
        if machines is None and attachable is None:
            c.warn(f"{where}: accelerator {accelerator.type} is not in the shape table")
            return
        if attachable is not None:
            if not shape.machine_type.startswith(attachable):
                c.warn(
                    f"{where}: {accelerator.type} attaches to {attachable}* machine types, "
                    f"not {shape.machine_type}"
                )
            return
        gpus = machines.get(shape.machine_type)
        if gpus is None:
            family = shapes.gke_machine_family(shape.machine_type)
            c.warn(
                f"{where}: {accelerator.type} does not exist on machine type "
                f"{shape.machine_type} (family {family})"
            )
        elif gpus != accelerator.count:
            c.warn(
                f"{where}: {shape.machine_type} carries {gpus} {accelerator.type}, but the "
                f"class asks for {accelerator.count}"
            )

    def driver_installer(self, provider_config: str | None) -> None:
        """The NVIDIA driver on every GPU node, by the COS installer DaemonSet GKE documents
        (its pods tolerate every taint, GKE's GPU taint included)."""
        c = self.cloud
        key = DRIVER_INSTALLER_KEY
        if provider_config is None or not c.on_cluster(key):
            return
        c.put(key, provider_config, gke_driver.daemonset(), ready_when=INSTALLED)

    def storage_class(self, provider_config: str | None) -> str | None:
        c = self.cloud
        key = "storage-class-rwx"
        if provider_config is None or not c.on_cluster(key):
            return None
        network = c.observed("network")

        def build(network_name: str, api: bool) -> None:
            del api
            manifest = kube.storage_class(
                STORAGE_CLASS,
                "filestore.csi.storage.gke.io",
                parameters={"tier": FILESTORE_TIER, "network": network_name},
                reclaimPolicy="Delete",
                # The zonal instance is made where the first pod using it runs, not in any zone
                # of the region (GKE "Filestore CSI driver": WaitForFirstConsumer).
                volumeBindingMode="WaitForFirstConsumer",
                allowVolumeExpansion=True,
            )
            c.put(key, provider_config, manifest)

        name = (network.external_name or network.get("metadata", "name")) if network else None
        c.keep_or_build(
            key,
            {
                "network_name": name if network and network.ready else None,
                "api": True if c.is_ready("filestore-api") else None,
            },
            build,
            "the VPC network and the Filestore API",
        )
        return STORAGE_CLASS if key in c.resources else None


@dataclass(frozen=True)
class Keys:
    """The access keys of one reconcile, by generation: those composed, the one the
    ProviderConfigs take and whether it is ready (or already held), and the one the stack's
    Usages keep."""

    composed: tuple[int, ...]
    use: int
    ready: bool
    anchor: int


def key_resource(generation: int) -> str:
    return KEY if generation == 1 else f"{KEY}-{generation}"


def is_generation(text: str) -> bool:
    """A generation after the first, as key_resource writes it."""
    return text.isdigit() and str(int(text)) == text and int(text) > 1


def key_generation(resource_key: str) -> int | None:
    if resource_key == KEY:
        return 1
    tail = resource_key.removeprefix(f"{KEY}-")
    return int(tail) if tail != resource_key and is_generation(tail) else None


def key_made(seen: ObservedResource) -> datetime | None:
    """When the key was made: its validAfter, else (not reported) its resource's creation,
    which comes first."""
    return clock.parse(seen.at_provider("validAfter")) or clock.parse(
        seen.get("metadata", "creationTimestamp")
    )


def rotation_due(seen: ObservedResource) -> bool:
    """Whether the key has reached its rotation age (KEY_ROTATES_AFTER, or 5/6 of a shorter
    life its validBefore gives it); unknown age: not yet."""
    made = key_made(seen)
    if made is None:
        return False
    after = KEY_ROTATES_AFTER
    ends = clock.parse(seen.at_provider("validBefore"))
    if ends is not None and ends > made:
        after = min(after, (ends - made) * 5 / 6)
    return clock.reached(made + after)


def key_usable(seen: ObservedResource) -> bool:
    """Ready, with its Secret written: Crossplane read the key from it, or the reconcile that
    found it Ready also published it (crossplane-runtime v2.2.1 pkg/reconciler/managed publishes
    them after each Observe, before anything else; a failed publish is Synced=False)."""
    written = KEY_SECRET_KEY in seen.connection_keys or is_true(seen.condition("Synced"))
    return seen.ready and written


def initial_per_zone(size: Scaling, zones: int) -> int:
    """The first nodes of each zone: enough for the initial total, never more than the maximum
    (the autoscaler enforces neither limit on nodes it did not add)."""
    per_zone = -(-size.initial // zones)
    return per_zone if per_zone * zones <= size.maximum else size.maximum // zones


def fixed_locations(zones: list[str], count: int) -> list[str]:
    """The first of the pool's zones that split count evenly: a fixed pool is exactly count
    nodes (nodeCount is per zone)."""
    if count == 0:
        return zones
    spread = max(d for d in range(1, len(zones) + 1) if count % d == 0)
    return zones[:spread]


def lags(member: rollout.Member, have: Minor) -> bool:
    """An observed pool that reports another minor than the control plane's (a pool whose
    version is not reported follows GKE's auto-upgrade)."""
    return member.exists and member.runs is not None and member.runs != have
