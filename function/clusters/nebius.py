"""Source Nebius: a VPC network and subnet, an mk8s cluster with a public endpoint, a system node
group and one GPU node group per pool, InfiniBand GPU clusters, and the shared file system that
backs ModelCache, as namespaced provider-nebius resources.

The cluster lives in the project of the Nebius ProviderConfig the credentials name (Nebius projects
are bound to a region, so the project is also where it runs). The function fetches that
ProviderConfig as a required resource, to name the project in status messages and to find its
service-account credentials Secret, but composes the infrastructure without waiting for it: every
resource names the ProviderConfig, and provider-nebius defaults each resource's parentId from its
projectID and pins it. Waiting would add nothing but a way for a ProviderConfig missing for a
moment to hold things back; a missing one is reported instead (condition and Warning).

mk8s kubeconfigs carry only the endpoint and CA: Nebius authenticates every client through IAM. So
the cluster's ProviderConfigs also need that service-account Secret as their identity; they wait
for it, and keep the identity they were composed with while the ProviderConfig cannot be read.
"""

import functools

from function import kube, names, shapes
from function.clusters import calendars, rollout
from function.clusters.base import (
    GPU_TAINT,
    NO_LATE_INIT,
    PROVIDER_CONFIG_KEYS,
    SYSTEM_LABELS,
    SYSTEM_NODES,
    Cloud,
    CloudConfig,
    Minor,
    Pool,
    minor,
    pool_labels,
    pool_version,
    text,
)
from function.clusters.eks import gpu_devices
from function.clusters.facts import ClusterFacts
from function.models import Nebius, NodePool
from function.output import Result
from function.providerconfigs import Identity
from function.versions import NEBIUS_SYSTEM_PLATFORM, NEBIUS_SYSTEM_PRESET

API_GROUP = "nebius.m.upbound.io"
VPC = "vpc.nebius.m.upbound.io/v1beta1"
MK8S = "mk8s.nebius.m.upbound.io/v1beta1"
COMPUTE = "compute.nebius.m.upbound.io/v1beta1"
IDENTITY_TYPE = "NebiusServiceAccountCredentials"
STORAGE_CLASS = "modelplane-rwx-fs"
CSI_DRIVER = "mounted-fs-path.csi.nebius.ai"
DISK_TYPE = "NETWORK_SSD"
# Shared file systems have a fixed size (nothing elastic like EFS): room for several large models.
CACHE_TYPE = "NETWORK_SSD"
CACHE_SIZE_GIB = 1024
# The tag node groups attach the file system under, where cloud-init mounts it, and the directory
# on it the CSI driver serves volumes from.
MOUNT_TAG = "modelplane-cache"
MOUNT_POINT = "/mnt/data"
DATA_DIR = f"{MOUNT_POINT}/csi-mounted-fs-path-data/"
USER_DATA_KEY = "userData"
# Mounts the shared file system at first boot and from fstab on every later boot; idempotent, so a
# re-run of cloud-init never stacks a second mount or fstab line.
CLOUD_INIT = f"""#cloud-config
runcmd:
  - mkdir -p {MOUNT_POINT}
  - mountpoint -q {MOUNT_POINT} || mount -t virtiofs {MOUNT_TAG} {MOUNT_POINT}
  - grep -qs ' {MOUNT_POINT} ' /etc/fstab || echo '{MOUNT_TAG} {MOUNT_POINT} virtiofs defaults,nofail 0 2' >> /etc/fstab
  - mkdir -p {DATA_DIR}
"""  # noqa: E501 - one shell line
FABRIC_LABEL = "modelplane.ai/fabric"
# The API server's audit log, pushed into Nebius Logging and shown in the web console ("By default
# cluster will be created without it"). Present and empty turns it on, as publicEndpoint does
# (nebius/api mk8s/v1 ControlPlaneSpec.audit_logs: AuditLogsSpec {}, MEANINGFUL_EMPTY_VALUE), and
# live clusters take it in place (terraform-provider-nebius v0.6.22 mk8s/v1 cluster_service:
# audit_logs has no RequiresReplace, subnet_id has). Kept 14 days (docs.nebius.com observability
# "Quotas and constraints"); docs/clouds/nebius.md says what it costs.
AUDIT_LOGS: dict = {}


# GPU node groups re-create nodes one at a time and add none: the default surge of one is one more
# 8-GPU VM on the same GPU cluster, which capacity often refuses, stalling the rollout (NodeGroup
# `strategy`, provider-upjet-nebius v1.0.1: maxSurge 0 needs maxUnavailable above 0).
# A drain gives up after drainTimeout and deletes what it could not evict: without one, a rollout
# waits for ever on a pod whose disruption budget allows no eviction (NodeGroup `drainTimeout`: 0,
# the default until Nebius moves it to 10m in Q3 2026, "means no timeout"). 15 minutes leaves an
# engine time to finish its requests.
GPU_STRATEGY = {"maxSurge": {"count": 0}, "maxUnavailable": {"count": 1}, "drainTimeout": "15m"}
# The system group creates a node before it deletes one (a CPU VM is there to be had), so the
# gateway's replicas move before their node goes; Nebius is moving the default to delete first.
SYSTEM_STRATEGY = {"maxSurge": {"count": 1}, "maxUnavailable": {"count": 0}, "drainTimeout": "10m"}


class NebiusCluster:
    def __init__(self, cloud: Cloud, settings: Nebius) -> None:
        self.cloud = cloud
        self.version = settings.kubernetes_version
        self.cluster_name = cloud.name("mk8s")

    def render(self) -> ClusterFacts:
        c = self.cloud
        config = c.cloud_provider_config(API_GROUP)
        problem = self.check_provider_config(config)
        pools = c.pools("Nebius", "nebius")
        calendars.check(c, calendars.NEBIUS, self.version)
        self.moving = self.rollout(pools)
        self.network()
        self.control_plane()
        self.cache_filesystem()
        self.gpu_clusters()
        self.system_node_group()
        for pool in pools:
            self.node_pool(pool)
        provider_config = self.provider_configs(config)
        self.csi_driver(provider_config)
        storage_class = self.storage_class(provider_config)
        facts = c.facts(provider_config, storage_class)
        project = (config.spec or {}).get("projectID")
        where = f"Nebius project {project}" if project else f"Nebius {config.describe}"
        facts.message = f"{problem or where}: {facts.message}"
        return facts

    def mr(self, key: str, api: str, kind: str, name: str, for_provider: dict, **kw) -> dict:
        """A managed resource; Nebius wants a name of its own, the provider derives none."""
        return self.cloud.managed(key, api, kind, name, {"name": name, **for_provider}, **kw)

    # --- the ProviderConfig the credentials name ------------------------------------------------

    def check_provider_config(self, config: CloudConfig) -> str | None:
        """What is wrong with the Nebius ProviderConfig (a Warning too, while it lasts)."""
        if not config.answered:
            return None
        if config.spec is None:
            found = "" if ", but" in config.describe else " not found"
            problem = (
                f"Nebius {config.describe}{found}; every Nebius resource of this cluster "
                "authenticates with it and waits until it exists"
            )
            self.cloud.warn(problem, reason="ProviderConfigNotFound")
            return problem
        if not config.spec.get("projectID"):
            problem = (
                f"Nebius {config.describe} has no spec.projectID; provider-nebius takes the "
                "cluster's project from it, so no resource can be created until it is set"
            )
            self.cloud.warn(problem, reason="ProviderConfigIncomplete")
            return problem
        return None

    def service_account(self, config: CloudConfig) -> Identity | None:
        """The service-account Secret the ProviderConfig authenticates with, if it has one."""
        c = self.cloud
        if config.spec is None:
            return None
        service_account = (config.spec.get("identity") or {}).get("type") == "ServiceAccount"
        identity = config.secret_identity(IDENTITY_TYPE) if service_account else None
        if identity is None and c.observed("provider-config-helm") is None:
            c.warn(
                f"Nebius {config.describe} does not authenticate with service-account "
                "credentials from a Secret (credentials.source Secret, identity.type "
                "ServiceAccount); the cluster's ProviderConfigs need them, since mk8s kubeconfigs "
                "carry no credentials, and wait for them",
                reason="UnsupportedIdentity",
            )
        return identity

    def provider_configs(self, config: CloudConfig) -> str | None:
        """Kubeconfig plus service-account identity (provider-kubernetes v1.3.1 and provider-helm
        v1.4.0 both take NebiusServiceAccountCredentials), once both are there."""
        c = self.cloud
        identity = self.service_account(config) or c.remembered_identity()
        kubeconfig = self.kubeconfig_ready()
        name = c.provider_configs(kubeconfig and identity is not None, identity)
        if name is None and kubeconfig:
            for key in PROVIDER_CONFIG_KEYS:
                if key in c.pending:
                    c.pending[key] = "service-account credentials"
        return name

    def kubeconfig_ready(self) -> bool:
        cluster = self.cloud.observed("cluster")
        return cluster is not None and (cluster.ready or "kubeconfig" in cluster.connection_keys)

    # --- network and control plane --------------------------------------------------------------

    def network(self) -> None:
        c = self.cloud
        self.mr("network", VPC, "Network", c.name("vpc"), {})
        self.mr(
            "subnet",
            VPC,
            "Subnet",
            c.name("subnet"),
            {
                "networkIdRef": {"name": c.name("vpc")},
                # Nebius allocates the subnet's CIDRs from the network's pools.
                "ipv4PrivatePools": {"useNetworkPools": True},
            },
        )

    def control_plane(self) -> None:
        c = self.cloud
        self.mr(
            "cluster",
            MK8S,
            "Cluster",
            self.cluster_name,
            {
                "controlPlane": {
                    "version": self.control_plane_version(),
                    "subnetIdRef": {"name": c.name("subnet")},
                    "endpoints": {"publicEndpoint": {}},
                    "auditLogs": dict(AUDIT_LOGS),
                },
            },
            connection_secret=names.kubeconfig_secret(c.xr),
        )

    # --- shared cache storage -------------------------------------------------------------------

    def cache_filesystem(self) -> None:
        """The file system every node group attaches, and the cloud-init that mounts it."""
        c = self.cloud
        self.mr(
            "filesystem",
            COMPUTE,
            "Filesystem",
            c.name("cache"),
            {"type": CACHE_TYPE, "sizeGibibytes": CACHE_SIZE_GIB},
        )
        # Node groups take user data only from a Secret in their own namespace; a Secret has no
        # Ready condition, it is usable once it exists.
        c.add(
            "cloud-init",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.cloud_init, "namespace": names.SYSTEM_NAMESPACE},
                "type": "Opaque",
                "stringData": {USER_DATA_KEY: CLOUD_INIT},
            },
            ready=True,
        )

    @property
    def cloud_init(self) -> str:
        return names.child_name(self.cloud.xr, "cloud-init")

    def gpu_clusters(self) -> None:
        """One GPU cluster per InfiniBand fabric the spec's pools name: created with the first
        pool on the fabric, shared by every pool on it, gone with the last."""
        c = self.cloud
        for fabric in fabrics(c):
            self.mr(
                f"gpu-cluster-{fabric}",
                COMPUTE,
                "GpuCluster",
                c.name("gpu-cluster", fabric),
                {"infinibandFabric": fabric},
                labels={FABRIC_LABEL: fabric},
            )

    # --- node groups ----------------------------------------------------------------------------

    def node_group(
        self, key: str, name: str, template: dict, size: dict, labels: dict | None = None
    ) -> None:
        c = self.cloud
        self.mr(
            key,
            MK8S,
            "NodeGroup",
            name,
            {
                "parentIdRef": {"name": self.cluster_name},
                "version": self.node_group_version(key),
                "template": {
                    "networkInterfaces": [{"subnetIdRef": {"name": c.name("subnet")}}],
                    # Every node mounts the cache: the CSI driver's node plugin runs on every node
                    # and refuses to start where the file system is not mounted.
                    "filesystems": [
                        {
                            "attachMode": "READ_WRITE",
                            "mountTag": MOUNT_TAG,
                            "existingFilesystem": {"idRef": {"name": c.name("cache")}},
                        }
                    ],
                    "cloudInitUserDataSecretRef": {"name": self.cloud_init, "key": USER_DATA_KEY},
                    **template,
                },
                **size,
            },
            policies=NO_LATE_INIT,
            labels=labels,
        )

    def running(self) -> str | None:
        """The control plane's version as mk8s reports it (1.31.2-nebius-cp.3)."""
        cluster = self.cloud.observed("cluster")
        running = cluster.at_provider("status", "controlPlane", "version") if cluster else None
        return running if isinstance(running, str) and running else None

    def control_plane_version(self) -> str:
        """The spec's version, or the next minor on the way to it: mk8s takes `<major>.<minor>`
        only (Cluster `controlPlane.version`), and a control plane moves one minor at a time
        (rollout.step), the next once every node group runs the minor the control plane runs.
        Older than the control plane: the spec's, which mk8s keeps below what it runs after its
        own upgrade (node_target)."""
        running = self.running()
        if running is None:  # not observed: hold what the control plane was asked for
            seen = self.cloud.observed("cluster")
            asked = seen.get("spec", "forProvider", "controlPlane", "version") if seen else None
            return asked if isinstance(asked, str) and asked else self.version
        want, have = minor(self.version), minor(running)
        if want is None or have is None or want <= have:
            return self.version
        if self.lagging(have):
            # The next minor waits; one already asked (by an earlier release, which sent the
            # spec's at once) is not taken back while mk8s may be moving to it.
            seen = self.cloud.observed("cluster")
            asked = seen.get("spec", "forProvider", "controlPlane", "version") if seen else None
            if isinstance(asked, str) and minor(asked) == (have[0], have[1] + 1):
                return asked
            return text(have)
        step = rollout.step(
            # mk8s publishes no rule for a jump; Kubernetes's own is a minor at a time.
            self.cloud,
            "spec.cluster.nebius.kubernetesVersion",
            self.version,
            running,
            "Kubernetes",
        )
        return text(step) if step else self.version

    def path(self) -> list[str]:
        """Every minor a node group asks for on its way to the spec's: each step above the minor
        the control plane runs, then the spec's. Nebius refuses a group whose drivers preset has
        no node image for the minor it asks for, and a group held on a step holds the rest
        (SRE review, 2026-12-07): each is checked, not the spec's alone."""
        have, want = minor(self.running()), minor(self.version)
        if have is None or want is None or want[0] != have[0] or want <= have:
            return [self.version]
        return [text((have[0], m)) for m in range(have[1] + 1, want[1])] + [self.version]

    def lagging(self, have: Minor) -> bool:
        """Whether a node group reports a minor other than the control plane's."""
        return any(m.exists and m.runs not in (None, have) for m in self.members)

    @functools.cached_property
    def node_target(self) -> str:
        """The minor the node groups move to, said once a reconcile: the spec's, or the control
        plane's where that is newer. mk8s upgrades a control plane whose version left support
        itself and leaves the Cluster's `version` as it was ("May be lower than the actual cluster
        version if the desired version is no longer supported and the cluster has been
        automatically updated", nebius/api mk8s/v1/cluster.proto), so the Cluster asks for the
        spec's and never fights it; the node groups follow the control plane, never back to the
        spec's older minor."""
        running = self.running()
        have, want = minor(running), minor(self.version)
        if have is None or want is None or have <= want:
            return self.version
        self.cloud.warn(
            f"spec.cluster.nebius.kubernetesVersion {self.version} is older than the {running} "
            f"the control plane runs: Nebius moved the cluster past it (mk8s upgrades a cluster "
            f"whose version left support) or the spec was lowered, and mk8s cannot downgrade "
            f"one, so the node groups follow {text(have)}, one at a time: set it to "
            f"{text(have)} or newer",
            reason="VersionDowngrade",
        )
        return text(have)

    def rollout(self, pools: list[Pool]) -> frozenset[str]:
        """The node groups that ask for the control plane's minor this reconcile: the system
        group, then the GPU groups one at a time, each once the one before runs the minor with
        none of its nodes outdated (rollout.movers)."""
        self.members: list[rollout.Member] = []
        have = minor(self.running())
        if have is None:
            return frozenset()
        c = self.cloud
        keys = [("system-nodegroup", False)] + [(f"nodegroup-{p.name}", True) for p in pools]
        members = []
        for key, gpu in keys:
            seen = c.observed(key)
            state = seen.at_provider("status") if seen else None
            state = state if isinstance(state, dict) else {}
            settled = not state.get("reconciling") and not state.get("outdatedNodeCount")
            members.append(
                rollout.Member(
                    key,
                    gpu=gpu,
                    exists=seen is not None,
                    asked=minor(seen.get("spec", "forProvider", "version") if seen else None),
                    runs=minor(state.get("version")),
                    ready=c.is_ready(key) and settled,
                )
            )
        self.members = members
        moving = rollout.movers(members, have)
        rollout.say(c, members, have, moving)
        return moving

    def node_group_version(self, key: str) -> str:
        """Node groups follow the control plane: a group's version may not be newer than its
        cluster's (NodeGroup `version`: "by default the cluster control plane <major>.<minor>
        version"), so a raised kubernetesVersion reaches them once the control plane runs it, a
        minor at a time when the control plane steps."""
        seen = self.cloud.observed(key)
        running = self.running()
        current = seen.get("spec", "forProvider", "version") if seen else None
        # mk8s takes <major>.<minor> only; the control plane reports 1.31.2-nebius-cp.3.
        at = ".".join(running.split(".")[:2]) if running else None
        if seen is not None and current and key not in self.moving:
            return current  # its turn has not come (rollout)
        target, have, asks = self.node_target, minor(running), minor(current)
        wanted = minor(target)
        if have and wanted and wanted > have and (asks is None or asks < have):
            # A step on the way to the spec's minor (control_plane_version): the group follows
            # the minor the control plane runs, never back from one it asks for.
            target = text(have)
        return pool_version(target, running, current or at)

    def system_node_group(self) -> None:
        c = self.cloud
        self.node_group(
            "system-nodegroup",
            c.name("system"),
            {
                "resources": {"platform": NEBIUS_SYSTEM_PLATFORM, "preset": NEBIUS_SYSTEM_PRESET},
                "bootDisk": {"sizeGibibytes": 100, "type": DISK_TYPE},
                "metadata": {"labels": SYSTEM_LABELS},
            },
            {
                "autoscaling": {"minNodeCount": SYSTEM_NODES[0], "maxNodeCount": SYSTEM_NODES[1]},
                "strategy": SYSTEM_STRATEGY,
            },
        )

    def node_pool(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        self.check_shape(pool)
        for version in self.path():
            calendars.check_drivers_preset(
                c, pool.name, pool.cls.name, shape.drivers_preset, version
            )
        accelerator = shape.accelerator.type if shape.accelerator else None
        template: dict = {
            "resources": {"platform": shape.platform, "preset": shape.preset},
            "bootDisk": {"sizeGibibytes": shape.disk_size_gb, "type": DISK_TYPE},
            "gpuSettings": {"driversPreset": shape.drivers_preset},
            "metadata": {"labels": pool_labels(pool, accelerator)},
            "taints": [{**GPU_TAINT, "effect": "NO_SCHEDULE"}],
        }
        fabric = infiniband_fabric(pool.spec)
        if fabric:
            template["gpuCluster"] = {"idRef": {"name": c.name("gpu-cluster", fabric)}}
        size = c.sizes(pool, "Nebius")
        if size.autoscaling:
            # mk8s scales the group itself between these bounds; it has no initial size, so the
            # group starts at its minimum and grows with pending pods.
            sizing: dict = {
                "autoscaling": {"minNodeCount": size.minimum, "maxNodeCount": size.maximum}
            }
            if size.initial > size.minimum:
                c.results.append(
                    Result(
                        "Normal",
                        f"pool {pool.name!r}: mk8s autoscaling has no initial size, so the node "
                        f"group starts at its minimum of {size.minimum} (not nodeCount "
                        f"{pool.spec.node_count}) and grows with demand up to {size.maximum}",
                        reason="AutoscalingFromMinimum",
                    )
                )
        else:
            sizing = {"fixedNodeCount": size.initial}
        self.node_group(
            f"nodegroup-{pool.name}",
            c.name("ng", pool.name),
            template,
            sizing | {"strategy": GPU_STRATEGY},
            {names.POOL_LABEL: pool.name},
        )

    def check_shape(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        where = f"pool {pool.name!r} (class {pool.cls.name!r}, {shape.platform} {shape.preset})"
        presets = shapes.NEBIUS_PRESETS.get(shape.platform)
        if presets is None:
            c.warn(f"{where}: platform not in the shape table; composed as asked")
            return
        gpus = presets.get(shape.preset)
        if gpus is None:
            c.warn(
                f"{where}: {shape.platform} has no preset {shape.preset} in the shape table "
                f"(known: {', '.join(sorted(presets))}); composed as asked"
            )
            return
        if infiniband_fabric(pool.spec) and shape.preset not in shapes.NEBIUS_INFINIBAND.get(
            shape.platform, frozenset()
        ):
            joinable = sorted(shapes.NEBIUS_INFINIBAND.get(shape.platform, ()))
            c.warn(
                f"{where}: fabric InfiniBand asked, but {shape.platform} {shape.preset} cannot "
                "join a GPU cluster"
                + (f" (only {', '.join(joinable)} can)" if joinable else " on any preset")
            )
        if shape.accelerator and shape.accelerator.count != gpus:
            c.warn(
                f"{where}: the class's accelerator count {shape.accelerator.count} disagrees "
                f"with the {gpus} GPUs of preset {shape.preset}"
            )
        declared = gpu_devices(pool)
        if declared is not None and declared != gpus:
            c.warn(
                f"{where}: the class declares {declared} GPU devices, but preset {shape.preset} "
                f"has {gpus}"
            )

    # --- on the cluster -------------------------------------------------------------------------

    def csi_driver(self, provider_config: str | None) -> None:
        """Nebius's csi-mounted-fs-path driver: RWX volumes from directories on the mount."""
        c = self.cloud
        values = {
            "dataDir": DATA_DIR,
            # The node plugin must run on the GPU nodes, where the engines mount cache volumes.
            "tolerations": [
                {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
            ],
        }
        c.install("csi-mounted-fs-path", provider_config, values)

    def storage_class(self, provider_config: str | None) -> str | None:
        c = self.cloud
        key = "storage-class-rwx-fs"
        if provider_config is None or not c.on_cluster(key):
            return None
        manifest = kube.storage_class(
            STORAGE_CLASS,
            CSI_DRIVER,
            reclaimPolicy="Delete",
            # The volume is a directory on the node's mount: provision it where the pod lands.
            volumeBindingMode="WaitForFirstConsumer",
        )
        c.put(key, provider_config, manifest)
        return STORAGE_CLASS


def infiniband_fabric(pool: NodePool) -> str | None:
    """The InfiniBand fabric a pool joins, if any."""
    fabric = pool.fabric
    if fabric and fabric.type == "InfiniBand" and fabric.infiniband:
        return fabric.infiniband.fabric
    return None


def fabrics(cloud: Cloud) -> list[str]:
    """Distinct fabrics of the spec's pools, whether or not their classes resolve this time: a
    pool's GPU cluster follows the pool's spec, never a class missing for a moment."""
    found = (infiniband_fabric(p) for p in cloud.inputs.xr.spec.node_pools)
    return sorted({f for f in found if f})
