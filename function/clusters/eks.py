"""Source EKS: a VPC, IAM, the EKS cluster, GPU node groups (Capacity Blocks, EFA), EFS storage
and the cluster autoscaler, all as namespaced provider-upjet-aws resources.

Resources reference each other by name (`...Ref`) wherever the provider can resolve it; values the
provider cannot resolve (the cluster security group, a launch template's version, the EFS id) are
read from observed status and gated, so nothing names what does not exist yet.
"""

import json
from datetime import timedelta

import yaml

from function import clock, kube, names, shapes
from function.clusters import aws_network, calendars, eks_dcgm, eks_upgrade
from function.clusters.base import (
    GPU_TAINT,
    NO_LATE_INIT,
    OBSERVE_ONLY,
    SYSTEM_LABELS,
    SYSTEM_NODES,
    Cloud,
    Part,
    Pool,
    minor,
    pool_labels,
    release,
)
from function.clusters.facts import ClusterFacts
from function.inputs import ObservedResource
from function.models import EKS
from function.output import Result
from function.versions import (
    EKS_ADDONS,
    EKS_GPU_AMI,
    EKS_SYSTEM_AMI,
    EKS_SYSTEM_INSTANCE_TYPE,
)
from function.workload import GATEWAY_LOAD_BALANCER, GPU_TOLERATION

EKS_API = "eks.aws.m.upbound.io/v1beta1"
IAM = "iam.aws.m.upbound.io/v1beta1"
EFS = "efs.aws.m.upbound.io/v1beta1"
LOGS = "cloudwatchlogs.aws.m.upbound.io/v1beta1"
# Who read Secrets or changed RBAC, and who authenticated as whom, on an API endpoint that is
# public: control-plane logging is off by default (EKS User Guide, "Send control plane logs to
# CloudWatch Logs"); EKS best practices (detective controls) ask for audit logs. The other types
# (api, controllerManager, scheduler) are left off: they are the bulk of the volume.
CONTROL_PLANE_LOGS = ["audit", "authenticator"]
# EKS writes into /aws/eks/<cluster>/cluster and, when that group does not exist, creates it with
# no expiry: the function composes it first, with a bounded retention.
LOG_RETENTION_DAYS = 90
EC2 = aws_network.EC2
STORAGE_CLASS = "modelplane-rwx-efs"
AWS_POLICY = "arn:aws:iam::aws:policy/"
# What the function knows of a pool's Capacity Block (EKSCluster.capacity_block).
BLOCK_UNKNOWN, BLOCK_PENDING, BLOCK_ACTIVE, BLOCK_ENDING = "unknown", "pending", "active", "ending"
# EC2 reclaims a Capacity Block's instances in its last 30 minutes and EKS scales the node group to
# zero before then; from an hour before the end the function holds no minimum.
BLOCK_END_MARGIN = timedelta(hours=1)
# On a Capacity Block node group being upgraded: the desired size to restore afterwards.
RESTORE_SIZE = "modelplane.ai/restore-desired-size"
# EKS node auto repair (EKS user guide, "Automatically repair nodes in EKS clusters"; off by
# default on managed node groups): a node NotReady for 30 minutes is replaced, and with the node
# monitoring agent's conditions (AcceleratedHardwareReady: XID errors, a GPU off the bus) rebooted
# or replaced after 10. EKS stops repairing a group of more than five nodes with over a fifth of
# them unhealthy. UpdateNodegroupConfig changes it on a live group, in place.
NODE_REPAIR = {"enabled": True}
# The EKS node monitoring agent sets the node conditions repair acts on (AcceleratedHardwareReady:
# XID errors, ECC, a GPU off the bus; NetworkingReady, KernelReady, StorageReady) and needs no
# IAM. Its node agent tolerates every taint, but its DCGM host engine (dcgm-server, on GPU
# instance types) tolerates none (aws/eks-node-monitoring-agent charts/ values.yaml,
# dcgmAgent.tolerations, v1.7.0): on nodes carrying the GPU taint it would never run. Where the
# add-on takes it, its placement is the function's (eks_dcgm.OWNED_AFFINITY: every amd64 NVIDIA
# node, so no GPU node is repaired for a host engine it lacks). No version: EKS installs its
# default for the cluster's minor, as for vpc-cni.
NODE_MONITORING_VALUES = {
    owned: json.dumps(
        {
            "dcgmAgent": {
                "tolerations": [GPU_TOLERATION],
                **({"affinity": eks_dcgm.OWNED_AFFINITY} if owned else {}),
            }
        },
        sort_keys=True,
    )
    for owned in (False, True)
}


def policy(statements: list[dict]) -> str:
    """An IAM policy document, serialised the same way every time."""
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def trusted_by(service: str, *actions: str) -> str:
    return policy(
        [
            {
                "Effect": "Allow",
                "Principal": {"Service": service},
                "Action": list(actions) or ["sts:AssumeRole"],
            }
        ]
    )


def autoscaler_policy(cluster_name: str) -> str:
    """Least privilege: change only this cluster's node groups' Auto Scaling groups."""
    return policy(
        [
            {
                "Effect": "Allow",
                "Action": [
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:TerminateInstanceInAutoScalingGroup",
                ],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {
                        f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"
                    }
                },
            },
            {
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                    "eks:DescribeNodegroup",
                ],
                "Resource": "*",
            },
        ]
    )


_PODS = trusted_by("pods.eks.amazonaws.com", "sts:AssumeRole", "sts:TagSession")
CNI_POLICY = AWS_POLICY + "AmazonEKS_CNI_Policy"
# The cluster's IAM roles: who assumes each, and its AWS-managed policies (attachment key suffix
# -> policy ARN). The cluster-autoscaler's role has a policy of its own (autoscaler_policy).
# Least privilege (EKS User Guide, "Amazon EKS node IAM role"): the nodes describe EC2 and pull
# from ECR (AmazonEC2ContainerRegistryPullOnly: pulls only, where ReadOnly also lists and
# describes every repository); the VPC CNI's rights over the VPC's network interfaces go to its
# own role, assumed by the `aws-node` service account through Pod Identity ("Configure Amazon VPC
# CNI plugin to use IRSA": "We recommend that you assign it to a separate role"; VPC CNI
# v1.15.5+ takes Pod Identity), so a pod that reaches the instance's credentials cannot rewrite
# them.
ROLES: dict[str, tuple[str, dict[str, str]]] = {
    "cluster": (
        trusted_by("eks.amazonaws.com", "sts:AssumeRole", "sts:TagSession"),
        {"eks": AWS_POLICY + "AmazonEKSClusterPolicy"},
    ),
    "node": (
        trusted_by("ec2.amazonaws.com"),
        {
            "worker": AWS_POLICY + "AmazonEKSWorkerNodePolicy",
            "ecr-pull": AWS_POLICY + "AmazonEC2ContainerRegistryPullOnly",
        },
    ),
    "vpc-cni": (_PODS, {"cni": CNI_POLICY}),
    "efs-csi": (_PODS, {"efs": AWS_POLICY + "service-role/AmazonEFSCSIDriverPolicy"}),
    "cluster-autoscaler": (_PODS, {}),
}
# What an earlier release attached to the node role (suffix -> policy ARN), kept on a live
# cluster only until what replaces it is in place and used (EKSCluster.node_handover).
NODE_HANDED_OVER = {
    "cni": CNI_POLICY,
    "ecr": AWS_POLICY + "AmazonEC2ContainerRegistryReadOnly",
}
# Pods that act in AWS through Pod Identity: (key, namespace, service account).
POD_IDENTITIES = (
    ("vpc-cni", "kube-system", "aws-node"),
    ("efs-csi", "kube-system", "efs-csi-controller-sa"),
    ("cluster-autoscaler", "kube-system", "cluster-autoscaler"),
)
# The VPC CNI's network policy agent (EKS User Guide, "Restrict Pod network traffic with
# Kubernetes network policies": add-on configuration `enableNetworkPolicy`, VPC CNI v1.14+,
# kernel 5.10+, which AL2023 has). It flips `--enable-network-policy` in the aws-node
# DaemonSet's node agent container (aws/amazon-vpc-cni-k8s charts/aws-vpc-cni), so every
# aws-node pod is created again: on a live cluster that roll is what moves aws-node onto its
# Pod Identity (node_handover).
NETWORK_POLICY = {"enableNetworkPolicy": "true"}
NETWORK_POLICY_FLAG = "--enable-network-policy=true"
# The aws-node DaemonSet, observed (never changed) while the node role keeps the CNI policy.
AWS_NODE = "aws-node-daemonset"
# On that Object: the VPC CNI add-on already ran its network policy agent (set outside the
# function) when the Object was made, so switching it on rolls nothing (node_handover).
POLICY_BEFORE = "modelplane.ai/network-policy-before"
# What `kubectl rollout restart` writes into a pod template.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


def _iam(part: Part, cluster_name: str, tags: dict) -> None:
    """Each role of ROLES and its policy attachments, and the cluster-autoscaler's policy."""
    for key, (trust, policies) in ROLES.items():
        role = part.name("role", key)
        part.managed(
            f"iam-role-{key}", IAM, "Role", role, {"assumeRolePolicy": trust, "tags": tags}
        )
        for suffix, arn in policies.items():
            part.managed(
                f"iam-attach-{key}-{suffix}",
                IAM,
                "RolePolicyAttachment",
                part.name("attach", key, suffix),
                {"policyArn": arn, "roleRef": {"name": role}},
            )
    part.managed(
        "iam-policy-cluster-autoscaler",
        IAM,
        "Policy",
        part.name("policy", "cluster-autoscaler"),
        {"policy": autoscaler_policy(cluster_name), "tags": tags},
    )
    part.managed(
        "iam-attach-cluster-autoscaler-policy",
        IAM,
        "RolePolicyAttachment",
        part.name("attach", "cluster-autoscaler", "policy"),
        {
            "policyArnRef": {"name": part.name("policy", "cluster-autoscaler")},
            "roleRef": {"name": part.name("role", "cluster-autoscaler")},
        },
    )


def _storage(part: Part, region: str, tags: dict, zones: list[str]) -> None:
    """An encrypted EFS file system, NFS from the VPC only, a mount target in every zone."""
    part.managed(
        "efs-filesystem",
        EFS,
        "FileSystem",
        part.name("efs"),
        {
            "region": region,
            "creationToken": part.name("efs"),
            "encrypted": True,
            "performanceMode": "generalPurpose",
            "throughputMode": "elastic",
            # A cache no one read for 30 days (a deleted cache's files among them: the
            # driver does not delete them, below) moves to Infrequent Access, priced a
            # fraction of Standard per GiB, and back on its first read (EFS lifecycle
            # management; one transition per policy block, as the API takes them).
            "lifecyclePolicy": [
                {"transitionToIa": "AFTER_30_DAYS"},
                {"transitionToPrimaryStorageClass": "AFTER_1_ACCESS"},
            ],
            "tags": tags,
        },
    )
    group = part.name("efs-nfs")
    description = "NFS to the model cache file system from the cluster's VPC"
    labels = {"modelplane.ai/sg-role": "efs"}
    _security_group(part, "efs-security-group", group, description, region, tags, labels)
    part.managed(
        "efs-security-group-ingress",
        EC2,
        "SecurityGroupIngressRule",
        part.name("efs-nfs", "ingress"),
        {
            "region": region,
            "securityGroupIdRef": {"name": group},
            "cidrIpv4": aws_network.VPC_CIDR,
            "ipProtocol": "tcp",
            "fromPort": 2049,
            "toPort": 2049,
            "tags": tags,
        },
    )
    for zone in zones:
        part.managed(
            f"efs-mount-target-{zone}",
            EFS,
            "MountTarget",
            part.name("efs-mt", zone),
            {
                "region": region,
                "fileSystemIdRef": {"name": part.name("efs")},
                "subnetIdRef": {"name": part.name("private", zone)},
                "securityGroupsRefs": [{"name": group}],
            },
        )


def _security_group(
    part: Part, key: str, group: str, description: str, region: str, tags: dict, labels: dict
) -> None:
    """A security group of the cluster's VPC, named group (its rules are resources of their own)."""
    part.managed(
        key,
        EC2,
        "SecurityGroup",
        group,
        {
            "region": region,
            "name": group,
            "description": description,
            "vpcIdRef": {"name": part.name("vpc")},
            "tags": tags,
        },
        labels=labels,
    )


def _efa_security_group(part: Part, region: str, tags: dict) -> None:
    """All traffic between EFA interfaces: a group that admits itself, both ways."""
    group = part.name("efa")
    description = "EFA traffic between the GPU nodes of one cluster"
    labels = {"modelplane.ai/fabric": "EFA"}
    _security_group(part, "efa-security-group", group, description, region, tags, labels)
    for direction, kind in (
        ("ingress", "SecurityGroupIngressRule"),
        ("egress", "SecurityGroupEgressRule"),
    ):
        part.managed(
            f"efa-security-group-{direction}",
            EC2,
            kind,
            part.name("efa", direction),
            {
                "region": region,
                "securityGroupIdRef": {"name": group},
                "referencedSecurityGroupIdRef": {"name": group},
                "ipProtocol": "-1",
                "tags": tags,
            },
        )


def _access(part: Part, region: str, cluster_name: str, tags: dict) -> None:
    """The cluster's kubeconfig (ClusterAuth), and the Pod Identity associations of the VPC CNI
    (aws-node), the EFS CSI controller and the cluster-autoscaler with their roles."""
    cluster_ref = {"clusterNameRef": {"name": cluster_name}}
    part.managed(
        "cluster-auth",
        EKS_API,
        "ClusterAuth",
        part.name("auth"),
        {"region": region, **cluster_ref},
        connection_secret=names.kubeconfig_secret(part.xr),
    )
    for key, namespace, account in POD_IDENTITIES:
        part.managed(
            f"pod-identity-{key}",
            EKS_API,
            "PodIdentityAssociation",
            part.name("pod-identity", key),
            {
                "region": region,
                **cluster_ref,
                "namespace": namespace,
                "serviceAccount": account,
                "roleArnRef": {"name": part.name("role", key)},
                "tags": tags,
            },
        )


class EKSCluster:
    def __init__(self, cloud: Cloud, settings: EKS) -> None:
        self.cloud = cloud
        self.region = settings.region
        self.version = settings.kubernetes_version
        self.cluster_name = cloud.name("eks", limit=100)
        self.tags = {"modelplane.ai/cluster": cloud.xr}
        # IAM role -> the keys of the role, its policies and attachments.
        self.identity: dict[str, list[str]] = {}

    def render(self) -> ClusterFacts:
        c = self.cloud
        # The stack reaches the cluster through ClusterAuth's kubeconfig, which needs the cluster.
        c.anchors = ("cluster-auth",)
        c.outlives.append(("cluster", "cluster-auth"))
        pools = c.pools("EKS", "eks")
        calendars.check(c, calendars.EKS, self.version)
        self.zones = aws_network.render(c, self.region, self.cluster_name, self.tags)
        self.outlive_load_balancers()
        node_groups = {"system-nodegroup", *(f"nodegroup-{p.name}" for p in pools)}
        node_groups |= {k for k in c.inputs.observed.resources if k.startswith("nodegroup-")}
        self.versions = eks_upgrade.plan(c, self.version, sorted(node_groups))
        self.iam()
        # The version EKS gave the agent's add-on is read once it exists: never asked of one
        # that may refuse. Its configuration and the GPU metrics releases follow the one answer.
        agent = c.observed(eks_dcgm.ADDON_KEY)
        self.dcgm_owned = eks_dcgm.owned(agent)
        outdated = eks_dcgm.outdated(agent, c.name("addon", eks_dcgm.ADDON)) if pools else None
        if outdated:
            c.warn(outdated, reason="NodeMonitoringAgentOutdated")
        logs = self.control_plane_log_group()
        self.control_plane(logs)
        self.system_node_group()
        efa = [p for p in pools if p.spec.fabric and p.spec.fabric.type == "EFA"]
        if efa:
            self.efa_security_group()
        for pool in pools:
            self.node_pool(pool)
        self.storage()
        provider_config = c.provider_configs(self.kubeconfig_ready())
        self.node_handover(provider_config)
        self.autoscaler(provider_config)
        if efa:
            self.efa_dra_driver(provider_config)
        storage_class = self.storage_class(provider_config)
        self.identities_outlive_their_users(node_groups)
        facts = c.facts(provider_config, storage_class)
        facts.dcgm_owned = self.dcgm_owned
        # The gateway's Service gets a Network Load Balancer from EKS's cloud provider, as the
        # EKS User Guide ("Route TCP and UDP traffic with Network Load Balancers") has it when
        # the AWS Load Balancer Controller is not installed; without it, a Classic one.
        facts.load_balancer_annotations = (
            ("service.beta.kubernetes.io/aws-load-balancer-type", "nlb"),
        )
        return facts

    def mr(self, key: str, api: str, kind: str, name: str, for_provider: dict, **kw) -> dict:
        """A managed resource in this cluster's region."""
        return self.cloud.managed(
            key, api, kind, name, {"region": self.region, **for_provider}, **kw
        )

    # --- IAM ------------------------------------------------------------------------------------

    def iam(self) -> None:
        """The cluster's IAM (made once a cluster: _iam), and which resources make up each
        role's identity."""
        self.cloud.made_once("iam", _iam, self.cluster_name, self.tags)
        for role, (_, policies) in ROLES.items():
            self.identity[role] = [
                f"iam-role-{role}",
                *(f"iam-attach-{role}-{s}" for s in policies),
            ]
        self.identity["cluster-autoscaler"] += [
            "iam-policy-cluster-autoscaler",
            "iam-attach-cluster-autoscaler-policy",
        ]
        # Kept on a live cluster for a while (node_handover); a Usage names only what is composed.
        self.identity["node"] += [f"iam-attach-node-{s}" for s in NODE_HANDED_OVER]

    def node_handover(self, provider_config: str | None) -> None:
        """The node role's policies of an earlier release, each kept until what replaces it is in
        place, decided from what is observed alone: never added to a cluster that does not have
        them, and never dropped while an observation is missing.

        ReadOnly goes once the PullOnly attachment is Ready (both are RolePolicyAttachments of
        their own, so the role is never without an ECR policy). AmazonEKS_CNI_Policy goes once
        aws-node runs on its Pod Identity (aws_node_on_pod_identity): Pod Identity credentials
        are injected by a webhook when a pod is created, so running aws-node pods keep using the
        node role until they are created again."""
        c = self.cloud
        kept = {}
        if c.observed("iam-attach-node-ecr") is not None and not c.is_ready(
            "iam-attach-node-ecr-pull"
        ):
            kept["ecr"] = NODE_HANDED_OVER["ecr"]
        if c.observed("iam-attach-node-cni") is not None:
            # Observed for as long as the policy is there: it may go a few reconciles after it
            # leaves (usages.retiring), and must not come back meanwhile.
            self.observe_aws_node(provider_config)
            if not self.aws_node_on_pod_identity():
                kept["cni"] = NODE_HANDED_OVER["cni"]
        for suffix, arn in kept.items():
            c.managed(
                f"iam-attach-node-{suffix}",
                IAM,
                "RolePolicyAttachment",
                c.name("attach", "node", suffix),
                {"policyArn": arn, "roleRef": {"name": c.name("role", "node")}},
            )

    def observe_aws_node(self, provider_config: str | None) -> None:
        """The aws-node DaemonSet as it runs (an Observe-only Object: read, never changed nor
        deleted, and not waited for). Made once the VPC CNI add-on reports (Ready), and marked
        (POLICY_BEFORE) when its network policy agent was on already: the function switches it
        on only after this Object is made, so then it was set outside the function."""
        c = self.cloud
        seen = c.observed(AWS_NODE)
        before = seen.get("metadata", "annotations", POLICY_BEFORE) if seen else None
        if seen is None and c.is_ready("addon-vpc-cni"):
            before = "true" if network_policy_on(c.observed("addon-vpc-cni")) else "false"

        def build(provider_config: str, before: str) -> None:
            manifest = {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "aws-node", "namespace": "kube-system"},
            }
            c.put(AWS_NODE, provider_config, manifest, policies=OBSERVE_ONLY)
            c.resources[AWS_NODE].body["metadata"]["annotations"] = {POLICY_BEFORE: before}

        needs = {"provider_config": provider_config, "before": before}
        c.keep_or_build(AWS_NODE, needs, build, "kubeconfig and the vpc-cni add-on")
        c.pending.pop(AWS_NODE, None)
        if AWS_NODE in c.resources:
            c.add(AWS_NODE, c.resources[AWS_NODE].body, ready=True)

    def aws_node_on_pod_identity(self) -> bool:
        """Whether every aws-node pod was created after its Pod Identity association existed:
        the association is Ready, the VPC CNI add-on runs a version that takes Pod Identity
        (v1.15.5+), and the aws-node DaemonSet has rolled out a template every pod of which was
        created after that: the one that switched the network policy agent on, which the add-on
        is given only once the association is Ready (vpc_cni_values); or, where the agent was on
        before (POLICY_BEFORE), one restarted (`kubectl rollout restart`) after the association
        became Ready, which the function asks for."""
        c = self.cloud
        if not c.is_ready("pod-identity-vpc-cni") or not c.is_ready("addon-vpc-cni"):
            return False
        version = c.observed("addon-vpc-cni").at_provider("addonVersion")
        if not isinstance(version, str) or release(version)[:3] < (1, 15, 5):
            return False
        seen = c.observed(AWS_NODE)
        daemonset = seen.at_provider("manifest") if seen else None
        if not isinstance(daemonset, dict):
            return False
        before = seen.get("metadata", "annotations", POLICY_BEFORE)
        if before == "false":
            return rolled_with(daemonset, NETWORK_POLICY_FLAG)
        return before == "true" and self.restarted_after_association(daemonset)

    def restarted_after_association(self, daemonset: dict) -> bool:
        """Whether aws-node was restarted (`kubectl rollout restart`) after its association
        became Ready, and has rolled out; if not, a Warning asks for it. Two times the
        providers report, compared with each other (the association's Ready transition, the
        template's restartedAt), never with the clock."""
        c = self.cloud
        ready = c.observed("pod-identity-vpc-cni").condition("Ready") or {}
        associated = clock.parse(ready.get("lastTransitionTime"))
        template = (daemonset.get("spec") or {}).get("template") or {}
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        restarted = clock.parse(annotations.get(RESTARTED_AT))
        if associated and restarted and restarted > associated and rolled_with(daemonset, ""):
            return True
        c.warn(
            "the VPC CNI add-on's network policy agent was on before this release, so no roll "
            "moves aws-node onto its Pod Identity: now that the vpc-cni association is Ready, "
            "run `kubectl rollout restart daemonset/aws-node -n kube-system`; the node role "
            "keeps AmazonEKS_CNI_Policy until every aws-node pod is restarted after that",
            reason="AwsNodeRestartNeeded",
        )
        return False

    def identities_outlive_their_users(self, node_groups: set[str]) -> None:
        """Every IAM role, policy and attachment outlives what acts with it, so a deletion never
        strands a resource that can no longer call AWS: the cluster role (AmazonEKSClusterPolicy)
        is how EKS's in-tree cloud provider deletes the gateway's load balancer (EKS User Guide
        cluster-iam-role; cloud-provider-aws), and without it the Service keeps its finalizer, the
        load balancer watch waits for ever and the NAT gateways, EIPs, EFS and control plane keep
        billing. The node role outlives the node groups; each Pod Identity role outlives its
        association and what runs with it (the nodes aws-node runs on, the EFS CSI add-on, the
        cluster-autoscaler release). What the node groups need outlives the cluster, which EKS
        keeps until its last node group is gone (DeleteCluster: "If you have managed node groups
        ... you must delete them first"; terraform-provider-aws resourceClusterDelete retries only
        an operation "in progress", so the provider reports the refusal and tries again): one
        Usage by the cluster instead of one by each node group."""
        users = {
            "cluster": ["cluster", GATEWAY_LOAD_BALANCER],
            "node": ["cluster"],
            "vpc-cni": ["pod-identity-vpc-cni", "cluster"],
            "efs-csi": ["pod-identity-efs-csi", "addon-aws-efs-csi-driver"],
            "cluster-autoscaler": [
                "pod-identity-cluster-autoscaler",
                "release-cluster-autoscaler",
            ],
        }
        for role, by in users.items():
            self.cloud.outlives.extend((of, user) for of in self.identity[role] for user in by)
        # The nodes outlive the stack: its controllers (Envoy Gateway, cert-manager, the DRA
        # driver) clear the finalizers of what they own while the stack uninstalls, which they
        # cannot do with their nodes gone; the chain up to ClusterAuth would then never end, and
        # the NAT gateways, EIPs, EFS and control plane keep billing.
        self.cloud.outlives.extend((group, "cluster-auth") for group in sorted(node_groups))

    # --- the control plane ----------------------------------------------------------------------

    def outlive_load_balancers(self) -> None:
        """The network outlives the cluster's kubeconfig writer, and so the whole stack: a load
        balancer the gateway's Service made is gone before its subnets and the internet
        gateway are deleted, so their deletion never loops on DependencyViolation."""
        c = self.cloud
        network = ["internet-gateway", "route-public-default"]
        network += [f"subnet-{tier}-{z}" for z in self.zones for tier in ("public", "private")]
        c.outlives.extend((key, "cluster-auth") for key in network)

    def kept_subnets(self, key: str, wanted: list[dict], *path: str) -> list[dict]:
        """The subnets a cluster or node group was composed with, for good: EKS cannot move a
        node group to other subnets (subnet_ids forces a new node group) nor a cluster to other
        zones ("all subnets that you add must be in the same set of AZs as originally
        provided", EKS User Guide network-reqs), so a zone added later is used only by the
        node groups created after it."""
        seen = self.cloud.observed(key)
        refs = seen.get("spec", "forProvider", *path, "subnetIdRefs") if seen else None
        kept = [
            {"name": r["name"]}
            for r in (refs if isinstance(refs, list) else [])
            if isinstance(r, dict) and isinstance(r.get("name"), str)
        ]
        return kept or wanted

    def control_plane_log_group(self) -> dict:
        """The log group EKS writes the control plane's logs to, and the cluster's logging
        setting: on once the group is Ready (so EKS never creates it without expiry), and on
        for good once the cluster has it. The group outlives the cluster. A new cluster waits
        for the group (seconds), so it is created logging rather than updated after."""
        c = self.cloud
        self.mr(
            "cluster-log-group",
            LOGS,
            "Group",
            c.name("eks-logs"),
            {"retentionInDays": LOG_RETENTION_DAYS, "tags": self.tags},
            annotations={names.EXTERNAL_NAME: f"/aws/eks/{self.cluster_name}/cluster"},
        )
        c.outlives.append(("cluster-log-group", "cluster"))
        seen = c.observed("cluster")
        live = seen.get("spec", "forProvider", "enabledClusterLogTypes") if seen else None
        if c.is_ready("cluster-log-group") or live:
            return {"enabledClusterLogTypes": CONTROL_PLANE_LOGS}
        return {}

    def control_plane(self, logs: dict) -> None:
        c = self.cloud
        if not c.when("cluster", bool(logs), "cluster-log-group"):
            return
        subnets = [{"name": c.name(tier, z)} for z in self.zones for tier in ("private", "public")]
        subnets = self.kept_subnets("cluster", subnets, "vpcConfig")
        moved = self.versions.moved_by_cloud
        self.mr(
            "cluster",
            EKS_API,
            "Cluster",
            self.cluster_name,
            {
                **logs,
                "version": self.versions.control_plane,
                # Standard support (a cluster in extended support already stays in it until
                # it runs a minor in standard support: eks_upgrade.support_type).
                "upgradePolicy": {"supportType": eks_upgrade.support_type(c)},
                "roleArnRef": {"name": c.name("role", "cluster")},
                "accessConfig": {
                    "authenticationMode": "API",
                    "bootstrapClusterCreatorAdminPermissions": True,
                },
                "vpcConfig": {
                    "endpointPrivateAccess": True,
                    "endpointPublicAccess": True,
                    "subnetIdRefs": subnets,
                },
                "tags": self.tags,
            },
            annotations={eks_upgrade.MOVED_BY_CLOUD: moved} if moved else None,
        )
        self.cloud.made_once("access", _access, self.region, self.cluster_name, self.tags)
        for addon in EKS_ADDONS:
            self.addon(addon, {"clusterNameRef": {"name": self.cluster_name}})

    def addon(self, addon: str, cluster_ref: dict) -> None:
        c = self.cloud
        key = f"addon-{addon}"
        spec = {
            **cluster_ref,
            "addonName": addon,
            "resolveConflictsOnCreate": "OVERWRITE",
            # A version the function moves an add-on to (kube-proxy and CoreDNS with each minor)
            # keeps what someone changed in the add-on's objects; without it (NONE) EKS fails
            # the update on any such change, and the next minor waits for ever (EKS User Guide,
            # "Update an Amazon EKS add-on"; UpdateAddon resolveConflicts).
            "resolveConflictsOnUpdate": "PRESERVE",
            "tags": self.tags,
        }
        if addon in self.versions.addons:
            spec["addonVersion"] = self.versions.addons[addon]
        if addon == "aws-efs-csi-driver":
            # The controller reads its credentials when its pods start: with no Pod Identity
            # association (and no agent) yet they fall back to the node role, which has no EFS
            # permissions. So the add-on comes after both. deleteAccessPointRootDir stays off,
            # said explicitly so clusters composed with it on turn it off: with it, DeleteVolume
            # mounts the file system through efs-utils, which asks IMDS for the region (the
            # driver passes no region option), and a controller pod reaches IMDS only where the
            # node's hop limit lets pods through, which this function closes wherever it sets
            # the launch template (hop limit 1) and must not depend on; DeleteVolume then fails
            # before DeleteAccessPoint and leaks both (kubernetes-sigs/aws-efs-csi-driver#1476,
            # #1913). The add-on's schema documents no other way to give the controller its
            # region. A deleted cache's files stay on EFS, moved to Infrequent Access (below).
            spec["configurationValues"] = json.dumps(
                {"controller": {"deleteAccessPointRootDir": False}}, sort_keys=True
            )
            after = ("pod-identity-efs-csi", "addon-eks-pod-identity-agent")
            if not c.when(key, all(c.is_ready(k) for k in after), "EFS CSI Pod Identity"):
                return
        if addon == eks_dcgm.ADDON:
            spec["configurationValues"] = NODE_MONITORING_VALUES[self.dcgm_owned]
        if addon == "vpc-cni":
            values = self.vpc_cni_values(key)
            if values is not None:
                spec["configurationValues"] = values
        self.mr(key, EKS_API, "Addon", c.name("addon", addon), spec)

    def vpc_cni_values(self, key: str) -> str | None:
        """The VPC CNI add-on's configuration with the network policy agent on (NETWORK_POLICY),
        merged over what its spec carries (set outside the function and late-initialised: JSON
        or YAML, as EKS takes it), or None to leave it as it is.

        A new add-on has it from the start. A live one gets it once the aws-node Pod Identity
        association is Ready, so the roll it causes creates every aws-node pod with its Pod
        Identity (node_handover); once set, it stays."""
        c = self.cloud
        seen = c.observed(key)
        live = seen.get("spec", "forProvider", "configurationValues") if seen else None
        live = live if isinstance(live, str) and live.strip() else None
        values = config_values(live) if live else {}
        if values is None:
            c.warn(
                "add-on vpc-cni: its configurationValues are not a JSON or YAML object, so the "
                "function leaves them, and the network policy agent, as they are (add "
                'enableNetworkPolicy: "true" there)',
                reason="NetworkPolicyNotEnforced",
            )
            return live
        if seen is not None and not policy_on(values) and not c.is_ready("pod-identity-vpc-cni"):
            return live
        return json.dumps({**values, **NETWORK_POLICY}, sort_keys=True)

    def kubeconfig_ready(self) -> bool:
        auth = self.cloud.observed("cluster-auth")
        return auth is not None and (auth.ready or "kubeconfig" in auth.connection_keys)

    # --- node groups ----------------------------------------------------------------------------

    def node_group(
        self,
        key: str,
        name: str,
        for_provider: dict,
        size: tuple[int, int, int],
        labels: dict | None = None,
        capacity_block: bool = False,
        desired: int | None = None,
        block: str = BLOCK_UNKNOWN,
        gpu: bool = False,
    ) -> None:
        # The control plane's version once it reports one (eks_upgrade), else the one set before;
        # while the groups follow it one at a time, the ones whose turn has not come keep theirs.
        seen = self.cloud.observed(key)
        if key in self.versions.held:
            version = self.versions.held[key]
        else:
            version = self.versions.nodes or (
                seen.get("spec", "forProvider", "version") if seen else None
            )
        annotations = None
        if capacity_block and isinstance(version, str):
            size, desired, version, annotations = self.block_upgrade(
                key, block, size, desired, version
            )
        minimum, maximum, initial = size
        update: dict = {"maxUnavailable": 1}
        if capacity_block or gpu:
            # The default rolling update launches new nodes before it removes old ones (up to two
            # a zone beyond the group's size): a Capacity Block holds exactly its instances, and
            # on-demand GPU instances are often not to be had (InsufficientInstanceCapacity, the
            # update fails after retries and is sent again). MINIMAL removes first
            # (UpdateNodegroupConfig updateStrategy, for constrained GPU capacity), so a version
            # or launch template rollout needs no capacity beyond the group's own.
            update["updateStrategy"] = "MINIMAL"
        spec = {
            "clusterNameRef": {"name": self.cluster_name},
            "nodeRoleArnRef": {"name": self.cloud.name("role", "node")},
            "updateConfig": update,
            "nodeRepairConfig": NODE_REPAIR,
            "tags": self.tags,
            **for_provider,
            "subnetIdRefs": self.kept_subnets(key, for_provider["subnetIdRefs"]),
        }
        if isinstance(version, str):
            spec["version"] = version
        resize = self.resize(seen, minimum, maximum, desired)
        if resize:
            spec["scalingConfig"] = resize
        self.mr(
            key,
            EKS_API,
            "NodeGroup",
            name,
            spec,
            init_provider={
                "scalingConfig": {"minSize": minimum, "maxSize": maximum, "desiredSize": initial}
            },
            policies=NO_LATE_INIT,
            labels=labels,
            annotations=annotations,
        )

    @staticmethod
    def resize(seen, minimum: int, maximum: int, desired: int | None) -> dict | None:
        """The scalingConfig to send, only while the group's sizes must change.

        The cluster-autoscaler owns a node group's desired size, so the sizes live in initProvider,
        sent at creation only. Not in forProvider: provider-upjet-aws v2.6.0's upjet filters an
        initProvider field's diff only when its whole block is initProvider's alone (the filter
        keys miss the singleton block's `.0.`, fixed upstream by crossplane/upjet#728, in no
        provider release yet; provider-upjet-aws#1907), so a desiredSize beside forProvider's
        min and max would be sent again on every sync and undo each scale-up. While the reported
        minimum or maximum differ from what the pool asks, or a desired size is set (a Capacity
        Block lifted or drained), all three go in forProvider in one update: EKS refuses a minimum
        above the desired size, so the desired size is the reported one kept within the bounds."""
        if seen is None:
            return None  # created from initProvider
        live = seen.at_provider("scalingConfig") or {}
        if desired is None and not (isinstance(live, dict) and live.get("minSize") is not None):
            return None  # nothing reported (yet, or for a moment): nothing to change
        if desired is None and (live.get("minSize"), live.get("maxSize")) == (minimum, maximum):
            return None
        if desired is None:
            current = live.get("desiredSize")
            current = int(current) if isinstance(current, int | float) else minimum
            desired = min(max(current, minimum), maximum)
        return {"minSize": minimum, "maxSize": maximum, "desiredSize": desired}

    def block_upgrade(
        self,
        key: str,
        block: str,
        size: tuple[int, int, int],
        desired: int | None,
        version: str,
    ) -> tuple[tuple[int, int, int], int | None, str, dict | None]:
        """A version step that reaches a Capacity Block group with nodes, as the EKS guide asks:
        scale it to 0, upgrade it, then restore its size. The size to restore is kept on the
        node group itself (RESTORE_SIZE annotation) until the group is back at it. Returns the
        (min, max, initial) sizes, the desired size, the version and the annotations to set."""
        c = self.cloud
        seen = c.observed(key)
        if seen is None:
            return size, desired, version, None
        running = seen.at_provider("version")
        current = seen.at_provider("scalingConfig", "desiredSize")
        nodes = int(current) if isinstance(current, int | float) else None
        kept = seen.get("metadata", "annotations", RESTORE_SIZE)
        restore = int(kept) if isinstance(kept, str) and kept.isdigit() else None
        maximum = size[1]
        at_zero = (0, maximum, 0)
        stepping = isinstance(running, str) and minor(running) != minor(version)
        if stepping and nodes:
            # Drain first: the version stays until the group has no node.
            restore = max(restore or 0, nodes)
            c.warn(
                f"pool {key.removeprefix('nodegroup-')!r}: its Capacity Block node group goes to "
                f"0 nodes for the upgrade to {version} (EKS guide: scale a Capacity Block node "
                f"group to 0 before upgrading it), then back to {restore}",
                reason="CapacityBlockUpgrade",
            )
            return at_zero, 0, str(running), {RESTORE_SIZE: str(restore)}
        if restore is None:
            return size, desired, version, None
        if stepping:
            return at_zero, 0, version, {RESTORE_SIZE: str(restore)}  # upgraded with no node
        back = min(restore, maximum)
        if block != BLOCK_ACTIVE or (nodes is not None and nodes >= back):
            # Back at its size (the autoscaler owns it again), or the block ended meanwhile.
            return size, desired, version, None
        return size, back, version, {RESTORE_SIZE: str(restore)}

    def nodes_may_join(self, key: str) -> bool:
        """A new node group is created once aws-node's Pod Identity association is Ready, so the
        aws-node pod of each node is created with it (the webhook injects Pod Identity when a
        pod is created): the node role has no CNI policy to fall back on. On a cluster whose node
        role still carries it (an earlier release's), nothing waits."""
        c = self.cloud
        ready = c.is_ready("pod-identity-vpc-cni") or c.observed("iam-attach-node-cni") is not None
        return c.when(key, ready, "vpc-cni Pod Identity")

    def system_node_group(self) -> None:
        c = self.cloud
        key, name = "launch-template-system", c.name("lt", "system")
        self.mr(
            key, EC2, "LaunchTemplate", name, self.template(name, EKS_SYSTEM_INSTANCE_TYPE, 100)
        )
        for_provider = {
            "amiType": EKS_SYSTEM_AMI,
            "labels": SYSTEM_LABELS,
            "subnetIdRefs": aws_network.private_subnet_refs(c, self.zones),
        }

        def build(version: int) -> None:
            launch = {"launchTemplate": {"name": name, "version": str(int(version))}}
            self.node_group(
                "system-nodegroup", c.name("system"), for_provider | launch, SYSTEM_NODES
            )

        if not self.nodes_may_join("system-nodegroup"):
            return
        lt = c.observed(key)
        c.keep_or_build(
            "system-nodegroup",
            {"version": lt.at_provider("latestVersion") if lt else None},
            build,
            "launch template version",
        )

    def template(self, name: str, instance_type: str, disk_gb: int) -> dict:
        """What every node group's launch template sets: the instance type, an encrypted gp3 root
        volume, and IMDSv2 with one hop, so pods (model code among them) cannot read the node
        role's credentials. Every controller that needs AWS gets them through Pod Identity; the
        node's own agents run on the host network (EKS User Guide, best practices: "Restrict
        access to the instance profile assigned to the worker node"; without a launch template
        EKS's default one sets a hop limit of 2)."""
        return {
            "name": name,
            "instanceType": instance_type,
            "updateDefaultVersion": True,
            "blockDeviceMappings": [
                {
                    "deviceName": "/dev/xvda",
                    "ebs": {
                        "volumeSize": disk_gb,
                        "volumeType": "gp3",
                        "encrypted": "true",
                        "deleteOnTermination": "true",
                    },
                }
            ],
            "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
            "tags": self.tags,
        }

    def node_pool(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        facts = shapes.EC2.get(shape.instance_type)
        self.check_shape(pool, facts)
        capacity_block = pool.spec.capacity_block
        efa = bool(pool.spec.fabric and pool.spec.fabric.type == "EFA")
        size = c.sizes(pool, "EKS")
        accelerator = shape.accelerator.type if shape.accelerator else None
        key = f"nodegroup-{pool.name}"
        subnets = aws_network.private_subnet_refs(c, pool.spec.zones or self.zones)
        if pool.spec.zones and self.kept_subnets(key, subnets) != subnets:
            c.warn(
                f"pool {pool.name!r}: zones {pool.spec.zones} are not applied, EKS cannot move a "
                "node group to other subnets; it keeps the zones it was created with (a pool of "
                "another name gets the new zones)",
                reason="ZonesImmutable",
            )
        for_provider: dict = {
            "amiType": EKS_GPU_AMI[facts.arch if facts else "x86_64"],
            "labels": pool_labels(pool, accelerator),
            "taint": [{**GPU_TAINT, "effect": "NO_SCHEDULE"}],
            "subnetIdRefs": subnets,
        }
        name = c.name("ng", pool.name)
        sizes = (size.minimum, max(size.maximum, 1), size.initial)
        block = BLOCK_UNKNOWN
        desired = None
        if capacity_block:
            for_provider["capacityType"] = "CAPACITY_BLOCK"
            block = self.capacity_block(pool, capacity_block.capacity_reservation_id, size.maximum)
            sizes, desired = self.block_sizes(key, block, sizes)
        template = self.launch_template(pool, facts, efa)

        def build(version: int, block_seen: bool) -> None:
            del block_seen
            launch = {"name": template, "version": str(int(version))}
            self.node_group(
                key,
                name,
                for_provider | {"launchTemplate": launch},
                sizes,
                {"modelplane.ai/pool": pool.name},
                capacity_block=bool(capacity_block),
                desired=desired,
                block=block,
                gpu=True,
            )

        if not self.nodes_may_join(key):
            return
        lt = c.observed(f"launch-template-{pool.name}")
        # A Capacity Block pool's node group is created once the block has been observed (or
        # found missing), so one whose block starts later is created asking for no nodes.
        block_seen = c.observed(f"capacity-block-{pool.name}")
        # Read by the provider (a Ready or Synced condition), not merely created.
        seen_block = not capacity_block or (
            block_seen is not None
            and (block_seen.condition("Ready") or block_seen.condition("Synced")) is not None
        )
        c.keep_or_build(
            key,
            {
                "version": lt.at_provider("latestVersion") if lt else None,
                "block_seen": True if seen_block else None,
            },
            build,
            "launch template version and Capacity Block",
        )

    def launch_template(self, pool: Pool, facts: shapes.EC2Type | None, efa: bool) -> str:
        """A pool's launch template (template(), plus its Capacity Block and EFA interfaces);
        returns its name."""
        c, shape = self.cloud, pool.shape
        key = f"launch-template-{pool.name}"
        name = c.name("lt", pool.name)
        for_provider = self.template(name, shape.instance_type, shape.disk_size_gb)
        capacity_block = pool.spec.capacity_block
        if capacity_block:
            for_provider["instanceMarketOptions"] = {"marketType": "capacity-block"}
            for_provider["capacityReservationSpecification"] = {
                "capacityReservationTarget": {
                    "capacityReservationId": capacity_block.capacity_reservation_id
                }
            }
        if not efa:
            self.mr(key, EC2, "LaunchTemplate", name, for_provider)
            return name

        placement = None
        if not capacity_block:
            # On demand, a cluster placement group keeps EFA peers close; a Capacity Block is
            # already colocated.
            placement = c.name("pg", pool.name)
            self.mr(
                f"placement-group-{pool.name}",
                EC2,
                "PlacementGroup",
                placement,
                {"strategy": "cluster", "tags": self.tags},
            )

        def build(efa_group: str, cluster_group: str, placed: bool) -> None:
            del placed
            groups = [efa_group, cluster_group]
            interfaces = [{**i, "securityGroups": groups} for i in efa_interfaces(facts)]
            spec = for_provider | {"networkInterfaces": interfaces}
            if placement:
                spec["placement"] = {"groupName": placement}
            self.mr(key, EC2, "LaunchTemplate", name, spec)

        efa_sg = c.observed("efa-security-group")
        cluster = c.observed("cluster")
        placed = placement is None or c.is_ready(f"placement-group-{pool.name}")
        c.keep_or_build(
            key,
            {
                "efa_group": efa_sg.at_provider("id") if efa_sg else None,
                "cluster_group": cluster.at_provider("vpcConfig", "clusterSecurityGroupId")
                if cluster
                else None,
                "placed": True if placed else None,
            },
            build,
            "EFA and cluster security group ids",
        )
        return name

    def capacity_block(self, pool: Pool, reservation: str, largest: int) -> str:
        """Observe the Capacity Block (CapacityBlockReservation, provider-upjet-aws v2.6.0: only
        forProvider.region with Observe, the reservation id as external name; it reports
        startDate, endDate, instanceCount, instanceType, availabilityZone). Says when it cannot
        carry the pool, and whether it has started (BLOCK_PENDING), runs (BLOCK_ACTIVE), nears its
        end (BLOCK_ENDING) or cannot be told (BLOCK_UNKNOWN)."""
        c = self.cloud
        key = f"capacity-block-{pool.name}"
        self.mr(
            key,
            EC2,
            "CapacityBlockReservation",
            c.name("cb", pool.name),
            {},
            policies=OBSERVE_ONLY,
            annotations={names.EXTERNAL_NAME: reservation},
        )
        seen = c.observed(key)
        # Observe-only: read, never waited for, but while the block has not started.
        c.add(key, c.resources[key].body, ready=True)
        if seen is None:
            return BLOCK_UNKNOWN
        where = f"capacity block {reservation} of pool {pool.name!r}"
        if not seen.ready:
            ready = seen.condition("Ready") or {}
            synced = seen.condition("Synced") or {}
            said = synced.get("message") or ready.get("message") or ready.get("reason")
            if said or ready:
                c.warn(
                    f"{where} is not active (expired, cancelled or not found): "
                    f"{said or 'no report yet'}",
                    reason="CapacityBlockInactive",
                )
            return BLOCK_UNKNOWN
        zone = seen.at_provider("availabilityZone")
        if zone and pool.spec.zones != [zone]:
            c.warn(f"{where} is in {zone}, but the pool's zones are {pool.spec.zones}")
        instance_type = seen.at_provider("instanceType")
        if instance_type and instance_type != pool.shape.instance_type:
            c.warn(
                f"{where} reserves {instance_type}, but class {pool.cls.name!r} asks for "
                f"{pool.shape.instance_type}"
            )
        count = seen.at_provider("instanceCount")
        if isinstance(count, int | float) and count < largest:
            c.warn(
                f"{where} reserves {int(count)} instances, fewer than the pool's {largest} nodes"
            )
        starts = clock.parse(seen.at_provider("startDate"))
        ends = clock.parse(seen.at_provider("endDate"))
        if starts is not None and not clock.reached(starts):
            when = seen.at_provider("startDate")
            c.warn(
                f"{where} starts at {when}: its node group asks for no nodes until then (EKS "
                "User Guide, Capacity Blocks for managed node groups)",
                reason="CapacityBlockPending",
            )
            c.add(key, c.resources[key].body, ready=False)
            c.why[key] = f"starts {when}"
            return BLOCK_PENDING
        if ends is not None and clock.reached(ends - BLOCK_END_MARGIN):
            c.results.append(
                Result(
                    "Normal",
                    f"{where} ends at {seen.at_provider('endDate')}: its node group's minimum is "
                    "0, so EKS can scale it to zero before the end",
                    "CapacityBlockEnding",
                )
            )
            return BLOCK_ENDING
        if ends is not None:
            c.results.append(
                Result(
                    "Normal", f"{where} runs until {seen.at_provider('endDate')}", "CapacityBlock"
                )
            )
        return BLOCK_ACTIVE

    def block_sizes(
        self, key: str, block: str, sizes: tuple[int, int, int]
    ) -> tuple[tuple[int, int, int], int | None]:
        """A Capacity Block group's (min, max, initial) and the desired size to set, if any.
        Before the block starts it asks for nothing (min 0, created at 0: the EKS guide creates
        Capacity Block node groups at 0 before the block is active); near its end its minimum is 0,
        so EKS's own scale-down to zero is never fought. While the block runs, a group below its
        minimum (created at 0, or scaled to 0 by EKS at the end of an earlier block) is lifted to
        its first size once; the autoscaler owns the desired size after that."""
        minimum, maximum, initial = sizes
        if block in (BLOCK_PENDING, BLOCK_ENDING):
            return (0, maximum, 0), None
        seen = self.cloud.observed(key)
        current = seen.at_provider("scalingConfig", "desiredSize") if seen else None
        if block == BLOCK_ACTIVE and isinstance(current, int | float) and current < minimum:
            return sizes, max(initial, minimum)
        return sizes, None

    def efa_security_group(self) -> None:
        self.cloud.made_once("efa-security-group", _efa_security_group, self.region, self.tags)

    def check_shape(self, pool: Pool, facts: shapes.EC2Type | None) -> None:
        c, shape = self.cloud, pool.shape
        where = f"pool {pool.name!r} (class {pool.cls.name!r}, {shape.instance_type})"
        efa = pool.spec.fabric and pool.spec.fabric.type == "EFA"
        if facts is None:
            c.warn(f"{where}: instance type not in the shape table; composed as asked")
            return
        if efa and not facts.efa_cards:
            c.warn(f"{where}: fabric EFA asked, but {shape.instance_type} has no EFA")
        if efa and len(pool.spec.zones) != 1:
            c.warn(f"{where}: EFA connects nodes of one Availability Zone; give the pool one zone")
        if shape.accelerator and shape.accelerator.count != facts.gpus:
            c.warn(
                f"{where}: the class's accelerator count {shape.accelerator.count} disagrees "
                f"with the {facts.gpus} {facts.model} GPUs of {shape.instance_type}"
            )
        declared = gpu_devices(pool)
        if declared is not None and declared != facts.gpus:
            c.warn(
                f"{where}: the class declares {declared} GPU devices, but {shape.instance_type} "
                f"has {facts.gpus}"
            )

    # --- storage --------------------------------------------------------------------------------

    def storage(self) -> None:
        """The model cache's file system (made once a cluster: _storage)."""
        self.cloud.made_once("storage", _storage, self.region, self.tags, self.zones)

    # --- on the cluster -------------------------------------------------------------------------

    def autoscaler(self, provider_config: str | None) -> None:
        c = self.cloud
        values = {
            "cloudProvider": "aws",
            "awsRegion": self.region,
            "autoDiscovery": {"clusterName": self.cluster_name},
            "rbac": {"serviceAccount": {"name": "cluster-autoscaler"}},
            "extraArgs": {
                "balance-similar-node-groups": True,
                # GPU pools whose pods claim through DRA keep one node (Cloud.sizes).
                "scale-down-unneeded-time": "10m",
                "enable-dynamic-resource-allocation": True,
            },
        }
        c.install("cluster-autoscaler", provider_config, values)

    def efa_dra_driver(self, provider_config: str | None) -> None:
        c = self.cloud
        values = {"tolerations": [GPU_TOLERATION]}
        c.install("efa-dra-driver", provider_config, values)

    def storage_class(self, provider_config: str | None) -> str | None:
        c = self.cloud
        key = "storage-class-rwx-efs"
        if provider_config is None or not c.on_cluster(key):
            return None

        def build(filesystem: str) -> None:
            manifest = kube.storage_class(
                STORAGE_CLASS,
                "efs.csi.aws.com",
                parameters={
                    "provisioningMode": "efs-ap",
                    "fileSystemId": filesystem,
                    "directoryPerms": "700",
                },
                reclaimPolicy="Delete",
                volumeBindingMode="Immediate",
            )
            c.put(key, provider_config, manifest)

        fs = c.observed("efs-filesystem")
        c.keep_or_build(
            key, {"filesystem": fs.at_provider("id") if fs else None}, build, "EFS file system id"
        )
        return STORAGE_CLASS if key in c.resources else None


def efa_interfaces(facts: shapes.EC2Type | None) -> list[dict]:
    """One EFA per EFA-capable network card, laid out as the EC2 guide says today.

    Card 0 carries the node's primary ENA interface at device 0 (and, if card 0 has EFA, an
    efa-only interface at device 1); every other EFA card gets one efa-only interface at device
    0. Secondary cards must be efa-only: as plain `efa` they would be managed as IP interfaces
    and the node would never join.
    """
    cards = facts.efa_cards if facts and facts.efa_cards else (0,)
    interfaces = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]
    for card in cards:
        interfaces.append(
            {
                "networkCardIndex": card,
                "deviceIndex": 1 if card == 0 else 0,
                "interfaceType": "efa-only",
            }
        )
    return [{**i, "deleteOnTermination": "true"} for i in interfaces]


def gpu_devices(pool: Pool) -> int | None:
    """GPUs the class declares (devices published by gpu.nvidia.com), if it declares any."""
    counts = [d.count for d in pool.cls.spec.devices if d.driver == "gpu.nvidia.com"]
    return sum(counts) if counts else None


def rolled_with(daemonset: dict, arg: str) -> bool:
    """Whether a DaemonSet (as observed) has every pod at its current template, and that
    template gives arg (if any) to one of its containers. Fields a DaemonSet's status leaves
    out at zero (updatedNumberScheduled, numberAvailable, numberUnavailable) count as zero."""
    meta = daemonset.get("metadata") or {}
    status = daemonset.get("status") or {}
    generation = meta.get("generation")
    desired = status.get("desiredNumberScheduled")
    if not isinstance(generation, int | float) or status.get("observedGeneration") != generation:
        return False
    if not isinstance(desired, int | float):
        return False
    if status.get("updatedNumberScheduled", 0) != desired:
        return False
    if status.get("numberAvailable", 0) != desired or status.get("numberUnavailable", 0):
        return False
    if not arg:
        return True
    template = (daemonset.get("spec") or {}).get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    return any(isinstance(c, dict) and arg in (c.get("args") or []) for c in containers)


def network_policy_on(addon: ObservedResource | None) -> bool:
    """Whether an observed VPC CNI add-on reports its network policy agent on."""
    live = addon.at_provider("configurationValues") if addon else None
    return isinstance(live, str) and policy_on(config_values(live) or {})


def policy_on(values: dict) -> bool:
    """Whether add-on configuration values turn the network policy agent on."""
    return all(values.get(k) == v for k, v in NETWORK_POLICY.items())


def config_values(text: str) -> dict | None:
    """An add-on's configurationValues as EKS takes them (a JSON or YAML object), or None. JSON
    first, which is what the function writes and reads back each reconcile; YAML (slower, pure
    Python) only for what was set outside the function."""
    try:
        values = json.loads(text)
    except ValueError:
        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
    return values if isinstance(values, dict) else None
