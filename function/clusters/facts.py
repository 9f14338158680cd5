"""What a cluster renderer tells the rest of the composition about the cluster it rendered."""

from dataclasses import dataclass, field

from function.output import Desired, Result


@dataclass
class ClusterFacts:
    resources: dict[str, Desired] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    # The cluster exists and the ProviderConfigs below can reach it.
    ready: bool = False
    reason: str = "Provisioning"
    message: str | None = None
    provider_config: str | None = None
    storage_class: str | None = None
    # False when an input was missing: resources already observed must be kept as they are.
    complete: bool = True
    # Where the NVIDIA driver lives on the nodes (the DRA driver's nvidiaDriverRoot).
    nvidia_driver_root: str = "/"
    # Resource keys of what installs that driver: the stack's DRA driver is first created once they
    # are Ready.
    nvidia_driver_installers: tuple[str, ...] = ()
    # Annotations of the gateway's LoadBalancer Service, for the cloud's load balancer.
    load_balancer_annotations: tuple[tuple[str, str], ...] = ()
    # Resources the serving stack needs alive until it is uninstalled: the kubeconfig's writer
    # (or GKE's access key); (resource key, the key its Usages go by) for one that changes
    # (usages.Anchor).
    anchors: tuple[str | tuple[str, str], ...] = ()
    # (of, by) resource keys: within the cluster, of outlives by.
    outlives: tuple[tuple[str, str], ...] = ()
    # Devices the cloud gives a pool's nodes beyond what its class declares, published in
    # status.gpuPools so replicas ask for them (AKS InfiniBand: rdma/shared_ib).
    pool_devices: dict[str, tuple[dict, ...]] = field(default_factory=dict)
    # EKS: whether the function places the node monitoring agent's DCGM host engine (decided
    # once, from the add-on it composes: function/clusters/eks_dcgm.py owned); the GPU metrics
    # releases follow it.
    dcgm_owned: bool = False
