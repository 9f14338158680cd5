"""GPU shapes each cloud sells: GPUs per node, GPU model, fabric cards. One table per cloud.

The facts come from ../shared/reference/gpu-shapes.md (its sources are named there). They feed
warnings only, never a Fatal: clouds add shapes faster than this table, so an unknown shape is
reported as unknown and composed as asked.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class EC2Type:
    gpus: int
    model: str
    network_cards: int = 1
    # Network cards that carry EFA; () for an instance type without EFA.
    efa_cards: tuple[int, ...] = ()
    arch: str = "x86_64"


def _cards(first: int, last: int) -> tuple[int, ...]:
    return tuple(range(first, last + 1))


_ONE = (0,)

# 1a of gpu-shapes.md. Sizes below 8xlarge of g5/g6/g6e have no EFA.
EC2: dict[str, EC2Type] = {
    "p4d.24xlarge": EC2Type(8, "A100", 4, _cards(0, 3)),
    "p4de.24xlarge": EC2Type(8, "A100", 4, _cards(0, 3)),
    "p5.4xlarge": EC2Type(1, "H100", 1, _ONE),
    "p5.48xlarge": EC2Type(8, "H100", 32, _cards(0, 31)),
    "p5e.48xlarge": EC2Type(8, "H200", 32, _cards(0, 31)),
    "p5en.48xlarge": EC2Type(8, "H200", 16, _cards(0, 15)),
    "p6-b200.48xlarge": EC2Type(8, "B200", 8, _cards(0, 7)),
    # Card 0 is ENA-only; EFA on the other sixteen.
    "p6-b300.48xlarge": EC2Type(8, "B300", 17, _cards(1, 16)),
    "p6e-gb200.36xlarge": EC2Type(4, "GB200", 17, _cards(1, 16), arch="arm64"),
    "g5.xlarge": EC2Type(1, "A10G"),
    "g5.2xlarge": EC2Type(1, "A10G"),
    "g5.4xlarge": EC2Type(1, "A10G"),
    "g5.8xlarge": EC2Type(1, "A10G", 1, _ONE),
    "g5.16xlarge": EC2Type(1, "A10G", 1, _ONE),
    "g5.12xlarge": EC2Type(4, "A10G", 1, _ONE),
    "g5.24xlarge": EC2Type(4, "A10G", 1, _ONE),
    "g5.48xlarge": EC2Type(8, "A10G", 1, _ONE),
    "g6.xlarge": EC2Type(1, "L4"),
    "g6.2xlarge": EC2Type(1, "L4"),
    "g6.4xlarge": EC2Type(1, "L4"),
    "g6.8xlarge": EC2Type(1, "L4", 1, _ONE),
    "g6.16xlarge": EC2Type(1, "L4", 1, _ONE),
    "g6.12xlarge": EC2Type(4, "L4", 1, _ONE),
    "g6.24xlarge": EC2Type(4, "L4", 1, _ONE),
    "g6.48xlarge": EC2Type(8, "L4", 1, _ONE),
    "g6e.xlarge": EC2Type(1, "L40S"),
    "g6e.2xlarge": EC2Type(1, "L40S"),
    "g6e.4xlarge": EC2Type(1, "L40S"),
    "g6e.8xlarge": EC2Type(1, "L40S", 1, _ONE),
    "g6e.16xlarge": EC2Type(1, "L40S", 1, _ONE),
    "g6e.12xlarge": EC2Type(4, "L40S", 1, _ONE),
    "g6e.24xlarge": EC2Type(4, "L40S", 2, _cards(0, 1)),
    "g6e.48xlarge": EC2Type(8, "L40S", 4, _cards(0, 3)),
    "g7e.24xlarge": EC2Type(4, "RTX PRO 6000", 2, _cards(0, 1)),
    "g7e.48xlarge": EC2Type(8, "RTX PRO 6000", 4, _cards(0, 3)),
    "p3dn.24xlarge": EC2Type(8, "V100", 1, _ONE),
}

# 3a: accelerator type -> {machine type: GPUs}. Fixed-GPU families carry a fixed count.
GKE_ACCELERATORS: dict[str, dict[str, int]] = {
    "nvidia-l4": {
        **{f"g2-standard-{n}": 1 for n in (4, 8, 12, 16, 32)},
        "g2-standard-24": 2,
        "g2-standard-48": 4,
        "g2-standard-96": 8,
    },
    "nvidia-tesla-a100": {
        "a2-highgpu-1g": 1,
        "a2-highgpu-2g": 2,
        "a2-highgpu-4g": 4,
        "a2-highgpu-8g": 8,
        "a2-megagpu-16g": 16,
    },
    "nvidia-a100-80gb": {
        "a2-ultragpu-1g": 1,
        "a2-ultragpu-2g": 2,
        "a2-ultragpu-4g": 4,
        "a2-ultragpu-8g": 8,
    },
    "nvidia-h100-80gb": {
        "a3-highgpu-1g": 1,
        "a3-highgpu-2g": 2,
        "a3-highgpu-4g": 4,
        "a3-highgpu-8g": 8,
    },
    "nvidia-h100-mega-80gb": {"a3-megagpu-8g": 8},
    "nvidia-h200-141gb": {"a3-ultragpu-8g": 8},
    "nvidia-b200": {"a4-highgpu-8g": 8, "a4-highgpu-8g-lowmem": 8},
    "nvidia-gb200": {"a4x-highgpu-4g": 4, "a4x-highgpu-4g-nolssd": 4},
    "nvidia-gb300": {"a4x-maxgpu-4g-metal": 4, "a4x-maxgpu-4g-metal-nolssd": 4},
    "nvidia-rtx-pro-6000": {
        "g4-standard-48": 1,
        "g4-standard-96": 2,
        "g4-standard-192": 4,
        "g4-standard-384": 8,
    },
}
# T4 attaches to N1 machine types in a chosen count.
GKE_ATTACHABLE: dict[str, str] = {"nvidia-tesla-t4": "n1-"}


def gke_machine_family(machine_type: str) -> str:
    return machine_type.split("-", 1)[0]


# 2a/2b: AKS VM sizes (lowercase) -> GPUs; InfiniBand sizes carry the r (RDMA) of ND...r names.
AKS_SIZES: dict[str, int] = {
    "standard_nd96asr_v4": 8,
    "standard_nd96amsr_a100_v4": 8,
    "standard_nd96isr_h100_v5": 8,
    "standard_nd96isr_h200_v5": 8,
    "standard_nd96isr_mi300x_v5": 8,
    "standard_nd128isr_ndr_gb200_v6": 4,
    "standard_nd128isr_gb300_v6": 4,
    "standard_nd96is_h100_v5": 8,
    "standard_nd96is_h200_v5": 8,
    "standard_nd96ams_a100_v4": 8,
    "standard_nc24ads_a100_v4": 1,
    "standard_nc48ads_a100_v4": 2,
    "standard_nc96ads_a100_v4": 4,
    "standard_nc40ads_h100_v5": 1,
    "standard_nc80adis_h100_v5": 2,
    "standard_nv36ads_a10_v5": 1,
    "standard_nv36adms_a10_v5": 1,
    "standard_nv72ads_a10_v5": 2,
    "standard_nc4as_t4_v3": 1,
    "standard_nc8as_t4_v3": 1,
    "standard_nc16as_t4_v3": 1,
    "standard_nc64as_t4_v3": 4,
    "standard_nc6s_v3": 1,
    "standard_nc12s_v3": 2,
    "standard_nc24s_v3": 4,
    "standard_nc24rs_v3": 4,
}
# The largest OS disk (GiB) AKS can make ephemeral on a size, where Azure's Resource SKUs API
# (`az vm list-skus`) is known for it: Azure/karpenter-provider-azure's skugen records
# (pkg/fake/zz_generated.sku.southcentralus.go at 352646f: EphemeralOSDiskSupported True,
# SupportedEphemeralOSDiskPlacements ResourceDisk,CacheDisk), read by the rule AKS's node
# autoprovisioner (Karpenter) applies to its own VMs (FindMaxEphemeralSizeGBAndPlacement): the
# NVMe disk where it may hold the OS, else the cache (CachedDiskBytes), else the temp disk
# (MaxResourceVolumeMB); in GiB, not Karpenter's 10^9 bytes, since AKS counts osDiskSizeGb in GiB
# (Azure/AKS#2635: VMCacheSizeTooSmall names the bytes). AKS checks the SKU record, not the size's
# page (Azure/AKS#2672), and refuses a pool whose OS disk does not fit: sizes without a record here
# stay on managed disks. (Standard_NC6s_v3 has one, but the NCv3 series retired on 2025-09-30.)
AKS_EPHEMERAL_OS_GIB: dict[str, int] = {
    "standard_nc16as_t4_v3": 144,  # CachedDiskBytes 154618822656 (temp disk 352 GiB)
    "standard_nc24ads_a100_v4": 256,  # CachedDiskBytes 274877906944 (temp disk 64 GiB)
}
AKS_INFINIBAND: frozenset[str] = frozenset(
    {
        "standard_nd96asr_v4",
        "standard_nd96amsr_a100_v4",
        "standard_nd96isr_h100_v5",
        "standard_nd96isr_h200_v5",
        "standard_nd96isr_mi300x_v5",
        "standard_nd128isr_ndr_gb200_v6",
        "standard_nd128isr_gb300_v6",
    }
)

# 4a: Nebius platform -> {preset: GPUs}, and the platforms that can join an InfiniBand GPU cluster
# (8-GPU presets only; gb300's 4-GPU preset too).
NEBIUS_PRESETS: dict[str, dict[str, int]] = {
    "gpu-h100-sxm": {"1gpu-16vcpu-200gb": 1, "8gpu-128vcpu-1600gb": 8},
    "gpu-h200-sxm": {"1gpu-16vcpu-200gb": 1, "8gpu-128vcpu-1600gb": 8},
    "gpu-b200-sxm": {"1gpu-20vcpu-224gb": 1, "8gpu-160vcpu-1792gb": 8},
    "gpu-b200-sxm-a": {"1gpu-20vcpu-224gb": 1, "8gpu-160vcpu-1792gb": 8},
    "gpu-b300-sxm": {"1gpu-24vcpu-346gb": 1, "8gpu-192vcpu-2768gb": 8},
    "gpu-gb300": {"4gpu-112vcpu-800gb": 4},
    "gpu-l40s-a": {
        p: 1
        for p in (
            "1gpu-8vcpu-32gb",
            "1gpu-12vcpu-48gb",
            "1gpu-16vcpu-64gb",
            "1gpu-24vcpu-96gb",
            "1gpu-32vcpu-128gb",
            "1gpu-40vcpu-160gb",
        )
    },
    "gpu-l40s-d": {
        "1gpu-16vcpu-96gb": 1,
        "1gpu-24vcpu-144gb": 1,
        "1gpu-48vcpu-288gb": 1,
        "2gpu-48vcpu-288gb": 2,
        "2gpu-96vcpu-576gb": 2,
        "4gpu-96vcpu-576gb": 4,
        "4gpu-192vcpu-1152gb": 4,
    },
}
NEBIUS_INFINIBAND: dict[str, frozenset[str]] = {
    "gpu-h100-sxm": frozenset({"8gpu-128vcpu-1600gb"}),
    "gpu-h200-sxm": frozenset({"8gpu-128vcpu-1600gb"}),
    "gpu-b200-sxm": frozenset({"8gpu-160vcpu-1792gb"}),
    "gpu-b200-sxm-a": frozenset({"8gpu-160vcpu-1792gb"}),
    "gpu-b300-sxm": frozenset({"8gpu-192vcpu-2768gb"}),
    "gpu-gb300": frozenset({"4gpu-112vcpu-800gb"}),
}

# 5: Vultr vcg plans: per-GPU memory (GB) by GPU; whole GPUs = plan VRAM / per-GPU memory.
# B200: vcg-b200-248c-2826g-1536vram is 8 GPUs (../shared/reference/gpu-shapes.md section 5).
VULTR_GPU_MEMORY_GB: dict[str, int] = {"l40s": 48, "a100": 80, "a16": 16, "a40": 48, "b200": 192}


def vultr_gpus(plan: str) -> float | None:
    """GPUs of a vcg plan (vcg-<gpu>-<vCPU>c-<RAM>g-<VRAM>vram); below 1 is a fractional vGPU."""
    parts = plan.split("-")
    if len(parts) != 5 or parts[0] != "vcg" or not parts[4].endswith("vram"):
        return None
    per_gpu = VULTR_GPU_MEMORY_GB.get(parts[1])
    vram = parts[4].removesuffix("vram")
    if per_gpu is None or not vram.isdigit():
        return None
    return int(vram) / per_gpu
