"""The VPC of an EKS cluster: a public and a private subnet per zone, one NAT gateway per zone,
and a gateway endpoint for S3 on every private route table.

Every zone's resources are keyed by the zone and addressed from its letter, never from its place
in a list, so adding or removing a zone leaves every other zone as it is:

    VPC 10.0.0.0/16
    private subnet of zone letter i (a=0 ... l=11): 10.0.(16*i).0/20   nodes and pods
    public  subnet of zone letter i:                10.0.(192+4*i).0/22 load balancers, NAT
"""

from function.clusters.base import Cloud, Part

EC2 = "ec2.aws.m.upbound.io/v1beta1"
VPC_CIDR = "10.0.0.0/16"
ZONE_LETTERS = "abcdefghijkl"
# EKS wants subnets in two zones at least. Where a region's zone letters do not start at a, b
# (accounts see us-west-1b/c and ap-northeast-1a/c/d), pad from these instead.
PADDING_LETTERS = {"us-west-1": "bc", "ap-northeast-1": "acd"}


def zone_index(region: str, zone: str) -> int:
    """a=0 ... l=11; admission allows only the region followed by one of those letters."""
    return ZONE_LETTERS.index(zone.removeprefix(region))


def private_cidr(region: str, zone: str) -> str:
    return f"10.0.{16 * zone_index(region, zone)}.0/20"


def public_cidr(region: str, zone: str) -> str:
    return f"10.0.{192 + 4 * zone_index(region, zone)}.0/22"


def zones_in_use(cloud: Cloud, region: str) -> list[str]:
    """The pools' zones, every zone already built (a zone's network outlives its last pool, so
    nothing else is re-addressed), padded to two."""
    zones = {z for p in cloud.inputs.xr.spec.node_pools for z in p.zones}
    zones |= {
        key.removeprefix("subnet-private-")
        for key in cloud.inputs.observed.resources
        if key.startswith("subnet-private-")
    }
    for letter in PADDING_LETTERS.get(region, "abc"):
        if len(zones) >= 2:
            break
        zones.add(region + letter)
    return sorted(zones)


def render(cloud: Cloud, region: str, cluster_name: str, tags: dict) -> list[str]:
    """The VPC and its routing; returns the zones built."""
    zones = zones_in_use(cloud, region)
    cloud.made_once("network", _network, region, cluster_name, tags, zones)
    return zones


def _network(part: Part, region: str, cluster_name: str, tags: dict, zones: list[str]) -> None:
    """The network's resources, made once a cluster (Cloud.made_once)."""
    vpc_ref = {"vpcIdRef": {"name": part.name("vpc")}}
    part.managed(
        "vpc",
        EC2,
        "VPC",
        part.name("vpc"),
        {
            "region": region,
            "cidrBlock": VPC_CIDR,
            "enableDnsSupport": True,
            "enableDnsHostnames": True,
            "tags": {**tags, "Name": part.name("vpc")},
        },
    )
    part.managed(
        "internet-gateway",
        EC2,
        "InternetGateway",
        part.name("igw"),
        {"region": region, **vpc_ref, "tags": tags},
    )
    part.managed(
        "route-table-public",
        EC2,
        "RouteTable",
        part.name("rt-public"),
        {"region": region, **vpc_ref, "tags": tags},
    )
    part.managed(
        "route-public-default",
        EC2,
        "Route",
        part.name("route-public"),
        {
            "region": region,
            "routeTableIdRef": {"name": part.name("rt-public")},
            "destinationCidrBlock": "0.0.0.0/0",
            "gatewayIdRef": {"name": part.name("igw")},
        },
    )
    # S3 without the NAT gateways: ECR keeps image layers in S3, and model weights come from it;
    # through a NAT gateway each GB is billed (NAT data processing), through a gateway endpoint
    # nothing is (Amazon VPC, "Gateway endpoints for Amazon S3"; no charge for gateway
    # endpoints). Its default policy allows every S3 request, as the NAT path does.
    part.managed(
        "vpc-endpoint-s3",
        EC2,
        "VPCEndpoint",
        part.name("vpce-s3"),
        {
            "region": region,
            **vpc_ref,
            "serviceName": f"com.amazonaws.{region}.s3",
            "vpcEndpointType": "Gateway",
            "tags": {**tags, "Name": part.name("vpce-s3")},
        },
    )
    owned = {f"kubernetes.io/cluster/{cluster_name}": "shared"}
    for zone in zones:
        _zone(part, region, zone, vpc_ref, {**tags, **owned})


def _zone(part: Part, region: str, zone: str, vpc_ref: dict, tags: dict) -> None:
    public, private = part.name("public", zone), part.name("private", zone)
    for tier, name, cidr, role in (
        ("public", public, public_cidr(region, zone), "kubernetes.io/role/elb"),
        ("private", private, private_cidr(region, zone), "kubernetes.io/role/internal-elb"),
    ):
        part.managed(
            f"subnet-{tier}-{zone}",
            EC2,
            "Subnet",
            name,
            {
                "region": region,
                **vpc_ref,
                "availabilityZone": zone,
                "cidrBlock": cidr,
                "mapPublicIpOnLaunch": tier == "public",
                "tags": {**tags, role: "1", "Name": name},
            },
            labels={"modelplane.ai/zone": zone, "modelplane.ai/subnet-tier": tier},
        )
    part.managed(
        f"route-table-association-public-{zone}",
        EC2,
        "RouteTableAssociation",
        part.name("rta-public", zone),
        {
            "region": region,
            "routeTableIdRef": {"name": part.name("rt-public")},
            "subnetIdRef": {"name": public},
        },
    )
    part.managed(
        f"nat-eip-{zone}",
        EC2,
        "EIP",
        part.name("nat-eip", zone),
        {"region": region, "domain": "vpc", "tags": tags},
    )
    part.managed(
        f"nat-gateway-{zone}",
        EC2,
        "NATGateway",
        part.name("nat", zone),
        {
            "region": region,
            "allocationIdRef": {"name": part.name("nat-eip", zone)},
            "subnetIdRef": {"name": public},
            "connectivityType": "public",
            "tags": tags,
        },
    )
    table = part.name("rt-private", zone)
    part.managed(
        f"route-table-private-{zone}",
        EC2,
        "RouteTable",
        table,
        {"region": region, **vpc_ref, "tags": tags},
    )
    part.managed(
        f"route-private-default-{zone}",
        EC2,
        "Route",
        part.name("route-private", zone),
        {
            "region": region,
            "routeTableIdRef": {"name": table},
            "destinationCidrBlock": "0.0.0.0/0",
            "natGatewayIdRef": {"name": part.name("nat", zone)},
        },
    )
    part.managed(
        f"route-table-association-private-{zone}",
        EC2,
        "RouteTableAssociation",
        part.name("rta-private", zone),
        {
            "region": region,
            "routeTableIdRef": {"name": table},
            "subnetIdRef": {"name": private},
        },
    )
    # provider-upjet-aws v2.6.0 reports a VPCEndpoint's routeTableIds in status only: each route
    # table is attached by an association of its own (SOURCES.md of ../shared/crds).
    part.managed(
        f"vpc-endpoint-s3-private-{zone}",
        EC2,
        "VPCEndpointRouteTableAssociation",
        part.name("vpce-s3-rt", zone),
        {
            "region": region,
            "vpcEndpointIdRef": {"name": part.name("vpce-s3")},
            "routeTableIdRef": {"name": table},
        },
    )


def private_subnet_refs(cloud: Cloud, zones: list[str]) -> list[dict]:
    return [{"name": cloud.name("private", z)} for z in sorted(zones)]
