"""Typed views of the InferenceCluster and InferenceClass, with the XRDs' defaults and limits.

The XRDs reject bad input at admission; these models are the second line for anything that
slips past (an older XRD, a hand-made request). Validation is strict: a string where an integer
belongs is an error, not a conversion. Integers arrive from protobuf Structs as floats, so
integral floats are accepted as integers.
"""

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from function.output import shown

Source = Literal["GKE", "EKS", "AKS", "Nebius", "Vultr", "Existing"]
CLOUD_BLOCKS: dict[str, str] = {
    "GKE": "gke",
    "EKS": "eks",
    "AKS": "aks",
    "Nebius": "nebius",
    "Vultr": "vultr",
    "Existing": "existing",
}


def _integral(value: Any) -> Any:
    """Struct numbers are doubles: take 2.0 as 2, leave anything else for the strict int check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_integral)]
Name = Annotated[str, Field(min_length=1, max_length=253)]


def _unique_names(items: list[Any]) -> list[Any]:
    names = [item.name for item in items]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"names must be unique, repeated: {', '.join(duplicates)}")
    return items


def _only_the_block_of(model: BaseModel, selector: str) -> None:
    """The block named after the selected cloud (source, provider) is set, and no other one."""
    chosen = getattr(model, selector)
    wanted = CLOUD_BLOCKS[chosen]
    if getattr(model, wanted) is None:
        raise ValueError(f"{wanted} is required when {selector} is {chosen}")
    fields = type(model).model_fields
    others = [
        b
        for b in CLOUD_BLOCKS.values()
        if b != wanted and b in fields and getattr(model, b) is not None
    ]
    if others:
        raise ValueError(f"{', '.join(others)} not allowed when {selector} is {chosen}")


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        strict=True,
    )


# --- InferenceCluster ---------------------------------------------------------------------------


class Credentials(Model):
    name: Name = "default"
    type: Literal["ProviderConfig", "ClusterProviderConfig"] = "ClusterProviderConfig"


class Region(Model):
    credentials: Credentials = Credentials()
    region: Annotated[str, Field(min_length=1, max_length=32)]


class GKE(Region):
    kubernetes_version: str = "1.35"


# Regions of the other AWS partitions (aws-cn, aws-us-gov, aws-eusc, the aws-iso family): their IAM
# policy ARNs (arn:<partition>:iam::aws:policy/...) and some service names differ from the aws
# partition's, which the EKS renderer composes. The XRD's rule on spec.cluster.eks.region.
OTHER_PARTITION = re.compile(r"^(cn|us-gov|eusc)-|^[a-z]{2}-iso[a-z]?-")


class EKS(Region):
    kubernetes_version: str = "1.36"

    @field_validator("region")
    @classmethod
    def _aws_partition(cls, region: str) -> str:
        if OTHER_PARTITION.match(region):
            raise ValueError(
                "must be a region of the aws partition: AWS China (cn-), GovCloud (us-gov-), the "
                "European Sovereign Cloud (eusc-) and the ISO regions need IAM policy ARNs and "
                "service names the function does not compose"
            )
        return region


class AKS(Model):
    credentials: Credentials = Credentials()
    kubernetes_version: str = "1.34"
    location: Annotated[str, Field(min_length=1, max_length=32)]


class Nebius(Model):
    credentials: Credentials = Credentials()
    kubernetes_version: str = "1.34"


class Vultr(Region):
    kubernetes_version: str = "v1.36.1+3"


class SecretRef(Model):
    name: Name
    key: Name = "kubeconfig"


class IdentitySecretRef(Model):
    name: Name
    key: Name = "private_key"
    type: Literal[
        "GoogleApplicationCredentials",
        "AWSWebIdentityCredentials",
        "NebiusServiceAccountCredentials",
    ] = "GoogleApplicationCredentials"


class ExistingCache(Model):
    storage_class_name: Name | None = None


class Existing(Model):
    secret_ref: SecretRef
    identity_secret_ref: IdentitySecretRef | None = None
    cache: ExistingCache | None = None


class Cluster(Model):
    source: Source
    gke: GKE | None = None
    eks: EKS | None = None
    aks: AKS | None = None
    nebius: Nebius | None = None
    vultr: Vultr | None = None
    existing: Existing | None = None

    @model_validator(mode="after")
    def _one_block_for_the_source(self) -> "Cluster":
        _only_the_block_of(self, "source")
        return self

    @property
    def settings(self) -> GKE | EKS | AKS | Nebius | Vultr | Existing:
        """The block of the selected source."""
        return getattr(self, CLOUD_BLOCKS[self.source])


class CapacityBlock(Model):
    capacity_reservation_id: Annotated[
        str, Field(min_length=4, max_length=64, pattern=r"^cr-[0-9a-f]+$")
    ]


class InfiniBand(Model):
    fabric: Annotated[str, Field(min_length=1, max_length=63)]


class Fabric(Model):
    type: Literal["None", "EFA", "InfiniBand"] = "None"
    infiniband: InfiniBand | None = None


class NodePool(Model):
    # A label value: it is the modelplane.ai/pool node label replicas pin to.
    name: Annotated[
        str, Field(max_length=40, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    ]
    class_name: Name
    node_count: Annotated[Int, Field(ge=0)] = 1
    min_node_count: Annotated[Int, Field(ge=0)] | None = None
    max_node_count: Annotated[Int, Field(ge=1)] | None = None
    zones: list[str] = []
    capacity_block: CapacityBlock | None = None
    fabric: Fabric | None = None

    @property
    def nodes(self) -> int:
        """Capacity the scheduler may count on: the autoscaling ceiling, else the fixed size."""
        return self.max_node_count or self.node_count


class Taint(Model):
    key: Annotated[str, Field(min_length=1)]
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute"]


class PlacementMetadata(Model):
    labels: dict[str, str] = {}


class Placement(Model):
    metadata: PlacementMetadata = PlacementMetadata()


class InferenceClusterSpec(Model):
    cluster: Cluster
    node_pools: Annotated[
        list[NodePool], Field(min_length=1, max_length=8), AfterValidator(_unique_names)
    ] = []
    placement: Placement = Placement()
    stack: Literal["Standard", "Dynamo"] = "Standard"
    taints: list[Taint] = []

    @property
    def class_names(self) -> list[str]:
        """Distinct InferenceClass names, in pool order."""
        return list(dict.fromkeys(p.class_name for p in self.node_pools))

    @model_validator(mode="after")
    def _zones_of_the_cluster(self) -> "InferenceClusterSpec":
        """The XRD's zone rules again: renderers derive names and addresses from zones."""
        source, settings = self.cluster.source, self.cluster.settings
        region = getattr(settings, "region", "")
        for i, pool in enumerate(self.node_pools):
            for j, zone in enumerate(pool.zones):
                if source == "EKS":
                    ok = zone[: len(region)] == region and zone[len(region) :] in tuple(
                        "abcdefghijkl"
                    )
                    want = f"an Availability Zone of {region} (the region and a letter a to l)"
                elif source == "GKE":
                    ok = zone.startswith(f"{region}-") and len(zone) == len(region) + 2
                    want = f"a zone of {region} (the region, a dash and a letter)"
                elif source == "AKS":
                    ok, want = zone in ("1", "2", "3"), "an Azure availability zone 1, 2 or 3"
                else:
                    continue
                if not ok:
                    raise ValueError(f"spec.nodePools[{i}].zones[{j}] {shown(zone)} must be {want}")
        return self


class Metadata(Model):
    name: Annotated[str, Field(min_length=1)]


class InferenceCluster(Model):
    metadata: Metadata
    spec: InferenceClusterSpec

    @property
    def name(self) -> str:
        return self.metadata.name


# --- InferenceClass -----------------------------------------------------------------------------


class AttributeValue(Model):
    string: Annotated[str, Field(max_length=253)] | None = None
    version: Annotated[str, Field(max_length=32)] | None = None
    bool_: bool | None = Field(None, alias="bool")
    int_: Int | None = Field(None, alias="int")

    @model_validator(mode="after")
    def _exactly_one(self) -> "AttributeValue":
        set_ = [v for v in (self.string, self.version, self.bool_, self.int_) if v is not None]
        if len(set_) != 1:
            raise ValueError("set exactly one of string, version, bool or int")
        return self


class CapacityValue(Model):
    value: Annotated[str, Field(min_length=1, max_length=32)]


class Device(Model):
    name: Annotated[str, Field(min_length=1, max_length=63)]
    claim: Literal["DRA", "Synthetic"] = "DRA"
    driver: Name
    device_class_name: Name | None = None
    count: Annotated[Int, Field(ge=1, le=64)] = 1
    attributes: Annotated[dict[str, AttributeValue], Field(max_length=32)] = {}
    capacity: Annotated[dict[str, CapacityValue], Field(max_length=32)] = {}

    @model_validator(mode="after")
    def _dra_needs_a_device_class(self) -> "Device":
        if self.claim == "DRA" and self.device_class_name is None:
            raise ValueError("deviceClassName is required when claim is DRA")
        return self


class Accelerator(Model):
    type: Annotated[str, Field(min_length=1, max_length=63)]
    count: Annotated[Int, Field(ge=1, le=16)] = 1


DiskSizeGb = Annotated[Int, Field(ge=10, le=65536)]
Shape = Annotated[str, Field(min_length=1, max_length=63)]


class GKEProvisioning(Model):
    machine_type: Shape
    accelerator: Accelerator
    disk_size_gb: DiskSizeGb = 100


class EKSProvisioning(Model):
    instance_type: Shape
    accelerator: Accelerator | None = None
    disk_size_gb: DiskSizeGb = 100


class AKSProvisioning(Model):
    vm_size: Shape
    accelerator: Accelerator | None = None
    disk_size_gb: DiskSizeGb = 100


class NebiusProvisioning(Model):
    platform: Shape
    preset: Shape
    drivers_preset: Shape = "cuda13.0"
    accelerator: Accelerator | None = None
    disk_size_gb: DiskSizeGb = 100


class VultrProvisioning(Model):
    plan: Shape
    accelerator: Accelerator | None = None


class Provisioning(Model):
    provider: Literal["GKE", "EKS", "AKS", "Nebius", "Vultr"]
    gke: GKEProvisioning | None = None
    eks: EKSProvisioning | None = None
    aks: AKSProvisioning | None = None
    nebius: NebiusProvisioning | None = None
    vultr: VultrProvisioning | None = None

    @model_validator(mode="after")
    def _one_block_for_the_provider(self) -> "Provisioning":
        _only_the_block_of(self, "provider")
        return self


class InferenceClassSpec(Model):
    description: Annotated[str, Field(max_length=1024)] | None = None
    devices: Annotated[
        list[Device], Field(min_length=1, max_length=16), AfterValidator(_unique_names)
    ]
    provisioning: Provisioning | None = None


class InferenceClass(Model):
    metadata: Metadata
    spec: InferenceClassSpec

    @property
    def name(self) -> str:
        return self.metadata.name
