"""Names of what runs on every workload cluster that both the cloud renderers (function/clusters/)
and the serving stack (function/serving/) refer to, so a cloud renderer never imports the stack."""

# What tolerates the taint every GPU node carries (clusters/base.py GPU_TAINT): GPU drivers, device
# plugins and node-feature-discovery's worker.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# What node-feature-discovery labels every NVIDIA GPU node with (serving/components.py NFD_VALUES).
GPU_NODE_LABEL = "feature.node.kubernetes.io/pci-10de.present"

# Composed resource keys of the stack's components a cloud renderer orders its own against
# (serving/components.py RESOURCE_KEYS; a unit test holds them equal).
# The Object whose Service the cloud's load balancer is made for: it goes before the cloud's
# identities that delete that load balancer.
GATEWAY_LOAD_BALANCER = "gateway-load-balancer"
# The node-feature-discovery Release, whose CRDs a cloud's NodeFeatureRules need.
NODE_FEATURE_DISCOVERY_RELEASE = "release-node-feature-discovery"
