"""The quickstarts and the smoke test stay true: every file they name exists, every manifest they
apply validates against the real schemas, every version they state is the one the repository
pins, and the EKS IAM policy allows what the function composes on AWS."""

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from function.__version__ import __version__
from function.serving import gateway
from function.workload import GPU_TOLERATION
from tests.conftest import ROOT, crd_files
from tests.validation import validate_manifests

DOCS = ROOT / "docs"
PAGES = [*sorted((DOCS / "quickstart").glob("*.md")), DOCS / "smoke-test.md", DOCS / "scope.md"]
QUICKSTART = ROOT / "examples" / "quickstart"
SMOKE = ROOT / "examples" / "smoke"
CONFIGURATION_META = ROOT / "package" / "configuration" / "crossplane.yaml"
ACTIVATION_POLICY = ROOT / "package" / "configuration" / "activation-policy.yaml"
CROSSPLANE_GO_MOD = ROOT / "tests" / "tools" / "controlplane" / "crossplane" / "go.mod"
CRANK_GO_MOD = ROOT / "tests" / "tools" / "crank" / "go.mod"
STAND_IN_CRD = SMOKE / "control-plane" / "inferencegateway-crd.yaml"
SOURCES = ("eks", "gke", "aks", "nebius", "vultr", "existing")


def docs_of(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifests() -> list[Path]:
    return sorted([*QUICKSTART.rglob("*.yaml"), *SMOKE.rglob("*.yaml")])


def shell_blocks(path: Path) -> str:
    """The shell code blocks of a page, continuation lines joined."""
    blocks = re.findall(r"```shell\n(.*?)```", path.read_text(), re.S)
    return "\n".join(blocks).replace("\\\n", " ")


def provider_pins() -> dict[str, str]:
    """package -> version of every provider the Configuration depends on."""
    deps = yaml.safe_load(CONFIGURATION_META.read_text())["spec"]["dependsOn"]
    return {d["package"]: d["version"] for d in deps if d["kind"] == "Provider"}


def test_there_is_a_quickstart_per_source_and_the_shared_page_links_each():
    shared = (DOCS / "quickstart" / "README.md").read_text()
    for source in SOURCES:
        assert (DOCS / "quickstart" / f"{source}.md").is_file(), source
        assert f"]({source}.md)" in shared, source


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_file_a_page_names_exists(page):
    text = page.read_text()
    named = set(re.findall(r"\b(examples/[\w./-]*\w)", text))
    assert named or page.name == "scope.md"
    for path in named:
        assert (ROOT / path).exists(), f"{page.name} names {path}"
    for link in re.findall(r"\]\(([^)#:]+\.md)", text):
        assert (page.parent / link).is_file(), f"{page.name} links {link}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_kubectl_apply_targets_a_file_of_the_repository(page):
    shell = shell_blocks(page)
    # In code blocks and in prose (a cleanup step names what to delete after what).
    targets = re.findall(r"kubectl(?: --kubeconfig \S+)? (?:apply|delete) -f ([\w./-]+|-)", shell)
    targets += re.findall(r"`kubectl delete -f ([\w./-]+)`", page.read_text())
    for target in targets:
        assert target == "-" or (ROOT / target).is_file(), f"{page.name}: {target}"
    # A manifest piped through sed is one of the repository's too.
    for source in re.findall(r"sed \"[^\"]+\" (\S+) \| kubectl apply -f -", shell):
        assert (ROOT / source).is_file(), f"{page.name}: {source}"


def test_each_source_page_applies_its_example_and_cleans_up():
    for source in SOURCES:
        shell = shell_blocks(DOCS / "quickstart" / f"{source}.md")
        applied = re.findall(r"kubectl apply -f (examples/[\w-]+)/inferencecluster\.yaml", shell)
        assert len(applied) == 1, source
        xr = docs_of(ROOT / applied[0] / "inferencecluster.yaml")[0]
        name = xr["metadata"]["name"]
        assert f"kubectl delete ic {name} --cascade=foreground" in shell, source
        assert f"kubectl delete -f {applied[0]}/inferenceclasses.yaml" in shell, source
        assert "smoke-test.md" in (DOCS / "quickstart" / f"{source}.md").read_text(), source


def test_every_manifest_validates_against_the_real_schemas(crossplane, validate_cache, tmp_path):
    """Core kinds against the Kubernetes schema, strictly; the rest (Crossplane packages, provider
    ProviderConfigs, the Gateway API route, the stand-in InferenceGateway) through `crossplane beta
    validate` against the real CRDs."""
    docs = [d for path in manifests() for d in docs_of(path)]
    docs += docs_of(ROOT / "examples" / "gke-team" / "providerconfig.yaml")
    docs += docs_of(ROOT / "examples" / "nebius" / "providerconfig.yaml")
    kinds = {d["kind"] for d in docs}
    assert {
        "Configuration",
        "Provider",
        "DeploymentRuntimeConfig",
        "ClusterProviderConfig",
    } <= kinds
    assert {"ResourceClaimTemplate", "Deployment", "HTTPRoute", "InferenceGateway"} <= kinds
    count, report = validate_manifests(
        crossplane, validate_cache, docs, tmp_path, [*crd_files(), STAND_IN_CRD]
    )
    assert count or report


def test_the_credential_templates_are_in_the_format_each_provider_reads():
    aws = (QUICKSTART / "aws" / "credentials.ini").read_text().splitlines()
    assert aws[0] == "[default]"
    assert {line.split(" = ")[0] for line in aws[1:]} == {
        "aws_access_key_id",
        "aws_secret_access_key",
    }
    azure = json.loads((QUICKSTART / "azure" / "credentials.json").read_text())
    assert set(azure) == {"clientId", "clientSecret", "subscriptionId", "tenantId"}
    # provider-nebius identity.type ServiceAccount (its ProviderConfig CRD names the three keys).
    nebius = json.loads((QUICKSTART / "nebius" / "credentials.json").read_text())
    assert {"account_id", "public_key_id", "private_key"} <= set(nebius)
    assert json.loads((QUICKSTART / "vultr" / "credentials.json").read_text()).keys() == {"api_key"}
    # Each ProviderConfig reads the key its page creates the Secret with.
    for cloud, secret in (("aws", "aws-credentials"), ("azure", "azure-credentials")):
        (pc,) = docs_of(QUICKSTART / cloud / "providerconfig.yaml")
        ref = pc["spec"]["credentials"]["secretRef"]
        page = "eks" if cloud == "aws" else "aks"
        shell = shell_blocks(DOCS / "quickstart" / f"{page}.md")
        assert ref["name"] == secret
        assert f"create secret generic {secret} --from-file={ref['key']}=" in shell
    (pc,) = docs_of(QUICKSTART / "vultr" / "providerconfig.yaml")
    ref = pc["spec"]["credentials"]["secretRef"]
    assert f"create secret generic {ref['name']} --from-file={ref['key']}=" in shell_blocks(
        DOCS / "quickstart" / "vultr.md"
    )
    (pc,) = docs_of(ROOT / "examples" / "nebius" / "providerconfig.yaml")
    ref = pc["spec"]["credentials"]["secretRef"]
    assert f"create secret generic {ref['name']} --from-file={ref['key']}=" in shell_blocks(
        DOCS / "quickstart" / "nebius.md"
    )


def test_gke_cleanup_removes_every_role_and_binding_step_1_grants():
    text = shell_blocks(DOCS / "quickstart" / "gke.md")
    loops = re.findall(
        r"for role in (.*?); do\s+gcloud projects (add|remove)-iam-policy-binding", text, re.S
    )
    roles = {verb: set(re.findall(r"roles/[\w.]+", body)) for body, verb in loops}
    assert roles.keys() == {"add", "remove"}
    assert roles["add"] == roles["remove"]
    for verb in ("add", "remove"):
        assert f"gcloud iam service-accounts {verb}-iam-policy-binding" in text, verb
    assert "gcloud iam service-accounts delete" in text


# --- Versions. ----------------------------------------------------------------------------------


def test_crossplane_is_installed_at_the_version_the_e2e_runs():
    pinned = re.search(r"github.com/crossplane/crossplane/v2 (v\S+)", CROSSPLANE_GO_MOD.read_text())
    assert pinned
    # One version: the CLI the tests render and validate with is the same release.
    cli = re.search(r"github.com/crossplane/crossplane/v2 (v\S+)", CRANK_GO_MOD.read_text())
    assert cli and cli[1] == pinned[1]
    shell = shell_blocks(DOCS / "quickstart" / "README.md")
    (installed,) = re.findall(
        r"helm install crossplane crossplane-stable/crossplane --version (\S+)", shell
    )
    assert f"v{installed}" == pinned[1]
    floor = yaml.safe_load(CONFIGURATION_META.read_text())["spec"]["crossplane"]["version"]
    assert f"`{floor}`" in (DOCS / "quickstart" / "README.md").read_text()


def test_the_crossplane_cli_is_built_with_its_version():
    """`crossplane version --client` prints it, and `crossplane beta validate` names its default
    Crossplane image by it (an empty tag is an invalid reference): the Makefile stamps the
    variable crank's own release build sets, from the pinned module."""
    (cli,) = re.findall(r"github.com/crossplane/crossplane/v2 (v\S+)", CRANK_GO_MOD.read_text())
    target = "/nonexistent/crossplane"
    proc = subprocess.run(
        ["make", "-n", f"CROSSPLANE={target}", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"-X github.com/crossplane/crossplane/v2/internal/version.version={cli}" in proc.stdout


def test_the_configuration_is_the_release_at_hand():
    (cfg,) = docs_of(QUICKSTART / "crossplane" / "configuration.yaml")
    meta = yaml.safe_load(CONFIGURATION_META.read_text())
    assert cfg["metadata"]["name"] == meta["metadata"]["name"]
    assert cfg["spec"]["package"] == (
        f"xpkg.upbound.io/modelplane/{meta['metadata']['name']}:v{__version__}"
    )
    assert cfg["spec"]["package"] in (DOCS / "quickstart" / "README.md").read_text()


def test_the_providers_file_is_the_configuration_s_dependencies():
    listed = {}
    for doc in docs_of(QUICKSTART / "crossplane" / "providers.yaml"):
        package, version = doc["spec"]["package"].rsplit(":", 1)
        org, name = package.split("/")[1:]
        assert doc["metadata"]["name"] == f"{org}-{name}"
        listed[package] = version
    assert listed == provider_pins()


def test_keyless_gke_runs_every_provider_that_reaches_google_as_the_workload_identity():
    (drc,) = docs_of(QUICKSTART / "gcp" / "deploymentruntimeconfig.yaml")
    pins = provider_pins()
    keyless = {}
    for doc in docs_of(QUICKSTART / "gcp" / "providers-keyless.yaml"):
        package, version = doc["spec"]["package"].rsplit(":", 1)
        assert pins[package] == version, package
        assert doc["spec"]["runtimeConfigRef"]["name"] == drc["metadata"]["name"]
        keyless[package] = version
    needed = {
        p for p in pins if "-gcp" in p or p.endswith(("provider-kubernetes", "provider-helm"))
    }
    assert set(keyless) == needed
    account = drc["spec"]["serviceAccountTemplate"]["metadata"]
    member = f"[crossplane-system/{account['name']}]"
    assert member in shell_blocks(DOCS / "quickstart" / "gke.md")
    assert "iam.gke.io/gcp-service-account" in account["annotations"]


def test_the_shared_page_lists_every_provider_at_its_pinned_version():
    rows = [
        line
        for line in (DOCS / "quickstart" / "README.md").read_text().splitlines()
        if line.startswith("| provider")
    ]
    for package, version in provider_pins().items():
        name = package.rsplit("/", 1)[1]
        short = name.removeprefix("provider")  # "-aws-eks", as the table abbreviates
        assert any(
            (version in row and re.search(rf"(^|[\s,|]){re.escape(short)}($|[\s,|])", row))
            or (name in row and version in row)
            for row in rows
        ), name


# --- The EKS IAM policy. --------------------------------------------------------------------------

# What creating each managed kind the function composes on AWS calls (the create call of the
# Terraform resource each upjet kind wraps; reads are ec2:Describe*, eks:Describe* and the rest).
AWS_ACTIONS = {
    "addons.eks": "eks:CreateAddon",
    "capacityblockreservations.ec2": "ec2:DescribeCapacityReservations",
    "clusterauths.eks": "eks:DescribeCluster",
    "clusters.eks": "eks:CreateCluster",
    "eips.ec2": "ec2:AllocateAddress",
    "filesystems.efs": "elasticfilesystem:CreateFileSystem",
    "groups.cloudwatchlogs": "logs:CreateLogGroup",
    "internetgateways.ec2": "ec2:CreateInternetGateway",
    "launchtemplates.ec2": "ec2:CreateLaunchTemplate",
    "mounttargets.efs": "elasticfilesystem:CreateMountTarget",
    "natgateways.ec2": "ec2:CreateNatGateway",
    "nodegroups.eks": "eks:CreateNodegroup",
    "placementgroups.ec2": "ec2:CreatePlacementGroup",
    "podidentityassociations.eks": "eks:CreatePodIdentityAssociation",
    "policies.iam": "iam:CreatePolicy",
    "rolepolicyattachments.iam": "iam:AttachRolePolicy",
    "roles.iam": "iam:CreateRole",
    "routes.ec2": "ec2:CreateRoute",
    "routetableassociations.ec2": "ec2:AssociateRouteTable",
    "routetables.ec2": "ec2:CreateRouteTable",
    "securitygroupegressrules.ec2": "ec2:AuthorizeSecurityGroupEgress",
    "securitygroupingressrules.ec2": "ec2:AuthorizeSecurityGroupIngress",
    "securitygroups.ec2": "ec2:CreateSecurityGroup",
    "subnets.ec2": "ec2:CreateSubnet",
    "vpcendpointroutetableassociations.ec2": "ec2:ModifyVpcEndpoint",
    "vpcendpoints.ec2": "ec2:CreateVpcEndpoint",
    "vpcs.ec2": "ec2:CreateVpc",
}


def allowed(policy: dict, action: str) -> bool:
    """Whether an Allow statement's actions match the action (IAM wildcards)."""
    for s in policy["Statement"]:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        if s["Effect"] == "Allow" and any(
            re.fullmatch(re.escape(a).replace(r"\*", ".*"), action, re.I) for a in actions
        ):
            return True
    return False


def test_the_eks_policy_allows_every_aws_kind_the_function_composes():
    """Every AWS kind the Configuration activates (package/configuration/activation-policy.yaml:
    tests/test_reliability.py holds it to what the compositions make) is in the table above, and
    the policy allows its calls, with the actions the EKS page names in its prose."""
    policy = json.loads((QUICKSTART / "aws" / "iam-policy.json").read_text())
    activated = yaml.safe_load(ACTIVATION_POLICY.read_text())["spec"]["activate"]
    aws = {a.removesuffix(".aws.m.upbound.io") for a in activated if ".aws.m.upbound.io" in a}
    assert aws == set(AWS_ACTIONS), sorted(aws ^ set(AWS_ACTIONS))
    for kind, action in AWS_ACTIONS.items():
        assert allowed(policy, action), (kind, action)
    eks_page = (DOCS / "clouds" / "eks.md").read_text()
    for action in re.findall(r"`((?:logs|ec2):[A-Za-z]+)`", eks_page):
        assert allowed(policy, action), action
    # PassRole only to the services that take the roles the function makes.
    (passrole,) = [s for s in policy["Statement"] if s["Action"] == "iam:PassRole"]
    assert passrole["Condition"]["StringEquals"]["iam:PassedToService"]
    assert not [s for s in policy["Statement"] if "*" in s["Action"] or "iam:*" in s["Action"]]


# --- The smoke test. ------------------------------------------------------------------------------


def smoke() -> dict[str, dict]:
    return {d["kind"]: d for p in sorted((SMOKE / "workload").glob("*.yaml")) for d in docs_of(p)}


def test_the_smoke_route_attaches_to_the_gateway_the_function_composes():
    objs = smoke()
    ns, route = objs["Namespace"], objs["HTTPRoute"]
    listener = gateway.gateway("host.example")["spec"]["listeners"][0]
    (expr,) = listener["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"]
    assert expr["operator"] == "Exists" and expr["key"] in ns["metadata"]["labels"]
    (parent,) = route["spec"]["parentRefs"]
    assert (parent["name"], parent["namespace"], parent["sectionName"]) == (
        gateway.GATEWAY,
        gateway.NAMESPACE,
        listener["name"],
    )
    (rule,) = route["spec"]["rules"]
    prefix = rule["matches"][0]["path"]["value"]
    assert f"https://$HOST{prefix}/v1/chat/completions" in shell_blocks(DOCS / "smoke-test.md")
    (backend,) = rule["backendRefs"]
    service = objs["Service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"] == service["spec"]["ports"][0]["port"]


def test_the_smoke_server_claims_one_gpu_of_the_driver_s_class_and_tolerates_the_gpu_taint():
    objs = smoke()
    template, deploy = objs["ResourceClaimTemplate"], objs["Deployment"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["count"] == 1
    pod = deploy["spec"]["template"]["spec"]
    (claim,) = pod["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
    assert GPU_TOLERATION in pod["tolerations"]
    image, tag = container["image"].rsplit(":", 1)
    assert re.fullmatch(r"v\d+\.\d+\.\d+", tag), container["image"]
    assert container["image"] in (DOCS / "smoke-test.md").read_text()


def test_the_stand_in_carries_the_field_the_function_reads():
    crd, role = docs_of(STAND_IN_CRD)
    (version,) = crd["spec"]["versions"]
    assert f"{crd['spec']['group']}/{version['name']}" == "modelplane.ai/v1alpha1"
    assert crd["spec"]["names"]["kind"] == "InferenceGateway"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["clientCACertificate"]["maxLength"] == gateway.MAX_CA_BYTES
    assert role["metadata"]["labels"] == {"rbac.crossplane.io/aggregate-to-crossplane": "true"}
    (ig,) = docs_of(SMOKE / "control-plane" / "inferencegateway.yaml")
    # What the function would read of it once the page's patch published a CA.
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    published = {**ig, "status": {"clientCACertificate": ca}}
    assert gateway.client_cas([published]) == (
        gateway.ClientCA(f"{ig['metadata']['namespace']}/{ig['metadata']['name']}", ca),
    )
