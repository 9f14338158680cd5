"""Source Vultr: a VKE cluster (HA control plane, VKE's managed firewall, an inline system pool)
and one node pool per pool, as namespaced provider-vultr resources.

VKE installs the NVIDIA GPU Operator itself, with the driver the DRA driver reads from its
install root; whether a model can claim the GPUs is GPUsPublished's, as on every cloud
(function/serving/gpus.py). The operator's device plugin is switched off on Modelplane's GPU
pools by a node label: DRA is the only allocator. Node counts of autoscaling pools belong to VKE's
autoscaler: they are seeded once through initProvider, like the inline system pool, which VKE
only reads at creation anyway.

No RWX storage: Vultr File System attachments to GPU nodes are reported to fail (unverified, see
docs/clouds/vultr.md), so status.cache stays unset.
"""

from function import names, shapes
from function.clusters import calendars
from function.clusters.base import (
    GPU_TAINT,
    NO_LATE_INIT,
    SYSTEM_LABELS,
    SYSTEM_NODES,
    Cloud,
    Pool,
    pool_labels,
    release,
    scaling,
)
from function.clusters.eks import gpu_devices
from function.clusters.facts import ClusterFacts
from function.models import Vultr
from function.versions import VULTR_SYSTEM_PLAN

VKE = "vke.vultr.m.upbound.io/v1beta1"
# Lets the GPU Operator VKE installs leave the device plugin off these nodes, so its nvidia.com/gpu
# ledger never books the devices DRA allocates.
DEVICE_PLUGIN_OFF = {"nvidia.com/gpu.deploy.device-plugin": "false"}
# Where the GPU Operator's driver container puts the driver (DefaultDriverInstallDir,
# controllers/object_controls.go), the root the DRA driver reads it from.
GPU_OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
SECOND_SYSTEM_POOL = "system-nodepool"


def key_values(labels: dict[str, str]) -> list[dict]:
    """Kubernetes node labels as VKE takes them."""
    return [{"key": k, "value": v} for k, v in labels.items()]


class VultrCluster:
    def __init__(self, cloud: Cloud, settings: Vultr) -> None:
        self.cloud = cloud
        self.region = settings.region
        self.version = settings.kubernetes_version
        self.cluster_name = cloud.name("vke")

    def render(self) -> ClusterFacts:
        c = self.cloud
        pools = c.pools("Vultr", "vultr")
        calendars.check(c, calendars.VULTR, self.version)
        self.control_plane()
        self.check_firewall()
        self.second_system_pool()
        for pool in pools:
            self.node_pool(pool)
        provider_config = c.provider_configs(self.kubeconfig_ready())
        facts = c.facts(provider_config, None)
        facts.nvidia_driver_root = GPU_OPERATOR_DRIVER_ROOT
        return facts

    def control_plane(self) -> None:
        c = self.cloud
        c.managed(
            "cluster",
            VKE,
            "Kubernetes",
            self.cluster_name,
            {
                "label": self.cluster_name,
                "region": self.region,
                "version": self.control_plane_version(),
                "haControlplanes": True,
            },
            # VKE reads the inline pool at creation only, and its autoscaler owns the count after.
            # The firewall too is set at creation only (ForceNew in terraform-provider-vultr's
            # vke.go): from initProvider, so an older cluster is never replaced for it.
            init_provider={
                "enableFirewall": True,
                "nodePools": {
                    "label": c.name("system", limit=40),
                    "plan": VULTR_SYSTEM_PLAN,
                    "nodeQuantity": SYSTEM_NODES[2],
                    "autoScaler": True,
                    "minNodes": SYSTEM_NODES[0],
                    "maxNodes": SYSTEM_NODES[1],
                    "labels": key_values(SYSTEM_LABELS),
                },
            },
            policies=NO_LATE_INIT,
            connection_secret=names.kubeconfig_secret(c.xr),
        )

    def control_plane_version(self) -> str:
        """The spec's version, unless the cluster runs a newer build (upgraded from Vultr's
        console, or by Vultr): VKE cannot downgrade, and the provider asks VKE to upgrade to the
        spec's version whenever the two differ (terraform-provider-vultr v2.32.0
        resource_vultr_kubernetes.go Update), which would fail on every sync."""
        seen = self.cloud.observed("cluster")
        running = seen.at_provider("version") if seen else None
        if not isinstance(running, str) or release(running) <= release(self.version):
            return self.version
        self.cloud.warn(
            f"spec.cluster.vultr.kubernetesVersion {self.version} is older than the {running} the "
            f"cluster runs, and VKE cannot downgrade a cluster, so it stays at {running}",
            reason="VersionDowngrade",
        )
        return running

    def check_firewall(self) -> None:
        """The firewall group VKE made is what tells: the provider's Read never refreshes
        enableFirewall, only firewallGroupId (terraform-provider-vultr v2.32.0
        resource_vultr_kubernetes.go), so a cluster made without one reports none."""
        seen = self.cloud.observed("cluster")
        if seen is not None and seen.ready and not seen.at_provider("firewallGroupId"):
            self.cloud.warn(
                f"VKE cluster {self.cluster_name!r} was created without VKE's managed firewall, "
                "which VKE sets at creation only; add a firewall group to its nodes yourself",
                reason="NoFirewall",
            )

    def second_system_pool(self) -> None:
        """For a cluster whose inline system pool may shrink to one node (those created before
        v0.3.0 asked for one), a managed system pool of one or two more: VKE reads the inline
        pool at creation only, and with one system node a drain, a recycle or an upgrade (which
        re-provisions every worker) takes both gateway replicas down at once (SYSTEM_NODES).
        Once composed it stays; a cluster created with two has none."""
        c = self.cloud
        seen = c.observed("cluster")
        inline = seen.at_provider("nodePools") if seen else None
        smallest = None
        if isinstance(inline, dict):
            count = (
                inline.get("minNodes") if inline.get("autoScaler") else inline.get("nodeQuantity")
            )
            smallest = count if isinstance(count, int | float) else None
        short = smallest is not None and smallest < SYSTEM_NODES[0]
        if not short and c.observed(SECOND_SYSTEM_POOL) is None:
            return
        c.managed(
            SECOND_SYSTEM_POOL,
            VKE,
            "KubernetesNodePool",
            # Not c.name("np", ...): a pool of the spec may be named "system".
            c.name("system"),
            {
                "clusterIdRef": {"name": self.cluster_name},
                "label": c.name("system", "managed", limit=40),
                "plan": VULTR_SYSTEM_PLAN,
                "labels": key_values(SYSTEM_LABELS),
                "autoScaler": True,
                "minNodes": 1,
                "maxNodes": 2,
            },
            init_provider={"nodeQuantity": 1},
            policies=NO_LATE_INIT,
        )
        c.outlives.append(("cluster", SECOND_SYSTEM_POOL))

    def kubeconfig_ready(self) -> bool:
        cluster = self.cloud.observed("cluster")
        return cluster is not None and (cluster.ready or "kubeconfig" in cluster.connection_keys)

    def node_pool(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        self.check_shape(pool)
        size = scaling(pool.spec, floor=1)
        accelerator = shape.accelerator.type if shape.accelerator else None
        for_provider: dict = {
            "clusterIdRef": {"name": self.cluster_name},
            # The prefix of its nodes' names.
            "label": c.name("np", pool.name, limit=40),
            "plan": shape.plan,
            "labels": key_values(pool_labels(pool, accelerator) | DEVICE_PLUGIN_OFF),
            "taints": [GPU_TAINT],
            "autoScaler": size.autoscaling,
        }
        init_provider = None
        if size.autoscaling:
            for_provider |= {"minNodes": size.minimum, "maxNodes": size.maximum}
            init_provider = {"nodeQuantity": size.initial}
        else:
            for_provider["nodeQuantity"] = size.initial
        c.managed(
            f"nodepool-{pool.name}",
            VKE,
            "KubernetesNodePool",
            c.name("np", pool.name),
            for_provider,
            init_provider=init_provider,
            policies=NO_LATE_INIT,
            labels={names.POOL_LABEL: pool.name},
        )
        # Pools go before their cluster: the provider takes a pool for gone only on VKE's
        # "Invalid NodePool ID" (terraform-provider-vultr v2.32.0
        # resource_vultr_kubernetes_nodepools.go Read), and a pool whose cluster went first gets
        # another error, which would hold its finalizer and the XR's deletion for ever.
        c.outlives.append(("cluster", f"nodepool-{pool.name}"))

    def check_shape(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        where = f"pool {pool.name!r} (class {pool.cls.name!r}, {shape.plan})"
        gpus = shapes.vultr_gpus(shape.plan)
        if gpus is None:
            c.warn(f"{where}: not a GPU plan in the shape table; composed as asked")
            return
        if gpus < 1:
            c.warn(
                f"{where}: a fractional vGPU ({gpus:g} of a GPU); the class's devices describe "
                "whole GPUs"
            )
            return
        whole = int(gpus) if float(gpus).is_integer() else gpus
        if shape.accelerator and shape.accelerator.count != whole:
            c.warn(
                f"{where}: the class's accelerator count {shape.accelerator.count} disagrees "
                f"with the {whole:g} GPUs of the plan"
            )
        declared = gpu_devices(pool)
        if declared is not None and declared != whole:
            c.warn(
                f"{where}: the class declares {declared} GPU devices, but the plan has {whole:g}"
            )
