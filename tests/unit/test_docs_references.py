"""The docs name only what exists: every composed resource key, condition reason, examples/ path
and anchor link a page names is in the code, the goldens or the tree. Each rule is narrow enough
to have no false positives, and each is proved able to fail on a planted bad reference."""

import re
from pathlib import Path

import pytest

from function.serving import adoption
from function.versions import CHARTS, CLOUD_CHARTS
from tests.conftest import ROOT
from tests.releases import releases
from tests.unit.test_docs import reasons_and_conditions

GOLDEN = ROOT / "tests" / "golden"
RESOURCE_NAME = re.compile(r"crossplane\.io/composition-resource-name: ([a-z0-9-]+)")
# A composed resource key as the docs name one: backticked, of a family whose prefix is never
# anything else in these pages (a chart is `gateway-helm`, never `release-...`). Keys of other
# shapes (`cluster`, `network`) are ordinary words and not checked. A placeholder
# (`nodegroup-<pool>`) has a character outside the pattern and is not a claim.
KEY_FAMILIES = (
    "release",
    "detect",
    "addon",
    "provider-config",
    "usage",
    "iam-role",
    "iam-attach",
    "iam-policy",
    "pod-identity",
    "launch-template",
    "storage-class",
    "gpu-probe",
    "gpu-claim",
    "gpu-health",
    "modelexpress",
    "nfd-crd",
    "gaie-crd",
)
KEY_CLAIM = re.compile(rf"`((?:{'|'.join(KEY_FAMILIES)})-[a-z0-9-]+)`")
# A reason as the status page names one: the first cell of a table row, or a backticked CamelCase
# word in a "Reasons of `<condition>`:" paragraph (up to the blank line).
REASON_ROW = re.compile(r"^\| `([A-Z][A-Za-z]+)` \|", re.M)
REASONS_OF = re.compile(r"^Reasons of `[A-Za-z]+`:(.*?)(?:\n\n|\Z)", re.M | re.S)
CAMEL = re.compile(r"`([A-Z][a-z]+(?:[A-Z][a-z0-9]*)+|[A-Z][a-z]+)`")
EXAMPLE_PATH = re.compile(r"(?<![\w/.-])examples/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")
LINK = re.compile(r"\]\(([^)\s]*)\)")


def pages() -> list[Path]:
    """The pages checked: docs/*.md, docs/clouds/*.md, the README, and the CHANGELOG's current
    entry (older entries tell what was, in that release's words)."""
    docs = ROOT / "docs"
    return [*sorted(docs.glob("*.md")), *sorted((docs / "clouds").glob("*.md")), ROOT / "README.md"]


def changelog_current() -> str:
    """The current entry, without its lists of what goes on upgrade: those name what the
    previous release composed, which tests/test_upgrade.py holds to what actually goes."""
    text = (ROOT / "CHANGELOG.md").read_text()
    entries = re.split(r"^## ", text, flags=re.M)
    if len(entries) < 2:
        return ""
    sections = re.split(r"^(?=### )", entries[1], flags=re.M)
    kept = [s for s in sections if not s.startswith(("### Removed on", "### Replaced on"))]
    return "## " + "".join(kept)


def texts() -> dict[str, str]:
    out = {str(p.relative_to(ROOT)): p.read_text() for p in pages()}
    out["CHANGELOG.md (current entry)"] = changelog_current()
    return out


def known_keys() -> set[str]:
    """Every key a golden composes, and those the code composes under names only some inputs
    reach: each chart's release, each detector, and every key-shaped literal in function/."""
    keys = set()
    for path in GOLDEN.glob("*.yaml"):
        keys |= set(RESOURCE_NAME.findall(path.read_text()))
    keys |= {f"release-{name}" for name in (*CHARTS, *CLOUD_CHARTS)}
    keys |= {adoption.detector_key(c) for c in adoption.DETECTORS}
    literal = re.compile(rf"\"((?:{'|'.join(KEY_FAMILIES)})-[a-z0-9-]+)\"")
    for path in (ROOT / "function").rglob("*.py"):
        keys |= set(literal.findall(path.read_text()))
    return keys


def key_claims(text: str) -> set[str]:
    return set(KEY_CLAIM.findall(text))


def unknown_keys(text: str, keys: set[str]) -> set[str]:
    """Claimed keys that are no key, nor a key's prefix stem written for a family (`usage-` keys
    are written as `usage-<of>-by-<by>` in full only)."""
    return {k for k in key_claims(text) if k not in keys}


def code_words() -> set[str]:
    """Every reason and condition the code gives (test_docs's reading of Result, Condition, warn
    and `reason` assignments), and every CamelCase string literal in function/: a reason passed
    on in a tuple or a table is still a literal there."""
    reasons, conditions = reasons_and_conditions()
    words = reasons | conditions
    camel = re.compile(r"[\"']([A-Z][a-z]+(?:[A-Z][A-Za-z0-9]*)*)[\"']")
    for path in (ROOT / "function").rglob("*.py"):
        words |= set(camel.findall(path.read_text()))
    return words


def reason_claims(status: str) -> set[str]:
    claims = set(REASON_ROW.findall(status))
    for paragraph in REASONS_OF.findall(status):
        claims |= set(CAMEL.findall(paragraph))
    return claims


def example_claims(text: str) -> set[str]:
    return {m.rstrip(".,;:)") for m in EXAMPLE_PATH.findall(text)}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercased, punctuation but hyphens and spaces dropped,
    spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, seen = set(), {}
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(source: Path, text: str) -> set[str]:
    """Relative links whose file, or whose anchor in it, does not exist."""
    broken = set()
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or not target:
            continue
        file, _, anchor = target.partition("#")
        path = (source.parent / file).resolve() if file else source
        gone = not path.exists()
        if gone or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.add(target)
    return broken


# --- the rules, applied -------------------------------------------------------------------------


def test_every_resource_key_the_docs_name_is_composed():
    keys = known_keys()
    assert {"release-cert-manager", "provider-config-helm", "detect-gateway-api"} <= keys
    wrong = {name: sorted(unknown_keys(t, keys)) for name, t in texts().items()}
    wrong = {name: keys for name, keys in wrong.items() if keys}
    assert not wrong, f"keys named in the docs that nothing composes: {wrong}"


def test_every_reason_the_status_page_names_is_given_by_the_code():
    claims = reason_claims((ROOT / "docs" / "status.md").read_text())
    assert {"ProviderError", "Available", "Connecting"} <= claims
    assert not claims - code_words(), sorted(claims - code_words())


def test_every_example_the_docs_name_exists():
    missing = {}
    for name, text in texts().items():
        gone = sorted(p for p in example_claims(text) if not (ROOT / p).exists())
        if gone:
            missing[name] = gone
    assert not missing, f"examples named in the docs that do not exist: {missing}"


def test_every_link_and_anchor_the_docs_point_to_exists():
    broken = {}
    for path in [*pages(), ROOT / "CHANGELOG.md"]:
        text = changelog_current() if path.name == "CHANGELOG.md" else path.read_text()
        found = broken_links(path, text)
        if found:
            broken[str(path.relative_to(ROOT))] = sorted(found)
    assert not broken, f"links to files or sections that do not exist: {broken}"


# Where an example's comment sends the reader: a page by its path, and a part of it by a quoted
# name (`docs/clouds/gke.md, "GKE access"`) that must be there; "README, X" names a README section.
PAGE_REF = re.compile(r'((?:docs/[\w/.-]+|README)\.?m?d?)(?:, "([^"]+)"|, ([A-Z][\w ]*)\))')


def broken_example_refs(text: str) -> set[str]:
    """Pages an example's comments name that do not exist, or parts they name not in them."""
    broken = set()
    for page, quoted, bare in PAGE_REF.findall(text):
        path = ROOT / ("README.md" if page.startswith("README") else page)
        part = quoted or bare
        if not path.is_file():
            broken.add(page)
        elif page.startswith("README") and not any(
            part.lower() in line.lower()
            for line in path.read_text().splitlines()
            if line.startswith("#")
        ):
            broken.add(f"{page}, {part}")
        elif quoted and quoted not in path.read_text():
            broken.add(f"{page}, {quoted}")
    return broken


def test_every_page_an_example_points_to_exists():
    broken = {}
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        comments = "\n".join(line for line in path.read_text().splitlines() if "#" in line)
        found = broken_example_refs(comments)
        if found:
            broken[str(path.relative_to(ROOT))] = sorted(found)
    assert not broken, f"examples pointing at pages or sections that do not exist: {broken}"


def test_the_current_release_says_what_to_do_before_upgrading():
    # docs/operations.md's runbook starts from it.
    current = releases()[0]
    assert current.sections.get("Before upgrading", "").strip().startswith("Pulled out of")
    assert "#upgrading-a-fleet" in (ROOT / "docs" / "operations.md").read_text()


# --- each rule fails on a planted bad reference --------------------------------------------------


@pytest.mark.parametrize(
    ("planted", "caught"),
    [
        ("the `release-no-such-chart` release", {"release-no-such-chart"}),
        ("its `detect-nothing` detector", {"detect-nothing"}),
        ("`release-cert-manager` and `gateway-helm`", set()),
        ("`nodegroup-<pool>` per pool", set()),
    ],
)
def test_a_key_nothing_composes_is_caught(planted, caught):
    assert unknown_keys(planted, known_keys()) == caught


def test_a_reason_nothing_gives_is_caught():
    page = "| `NoSuchReason` | x | y |\n\nReasons of `ClusterReady`: `Available`, `Bogus` (z).\n"
    assert reason_claims(page) - code_words() == {"NoSuchReason", "Bogus"}


def test_an_example_that_does_not_exist_is_caught():
    claims = example_claims("see examples/eks/inferencecluster.yaml and examples/nowhere/x.yaml.")
    assert sorted(p for p in claims if not (ROOT / p).exists()) == ["examples/nowhere/x.yaml"]


def test_a_link_to_a_missing_section_or_page_is_caught(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text(
        "# Other\n\n## Upgrading a fleet\n\n```\n# not a heading\n```\n"
    )
    text = (
        "[a](other.md#upgrading-a-fleet) [b](other.md#rollback) [c](missing.md) "
        "[d](#here) [e](https://example.com/#x) [f](other.md#not-a-heading)\n\n# Here\n"
    )
    page.write_text(text)
    assert broken_links(page, text) == {"other.md#rollback", "missing.md", "other.md#not-a-heading"}


def test_an_example_pointing_at_a_missing_section_is_caught():
    assert broken_example_refs("# needs roles/container.admin (README, GKE).") == {"README, GKE"}
    assert broken_example_refs('# (docs/clouds/gke.md, "No such part").') == {
        "docs/clouds/gke.md, No such part"
    }
    assert broken_example_refs("# (docs/nowhere.md, Nothing)") == {"docs/nowhere.md"}
    assert not broken_example_refs('# (docs/clouds/gke.md, "GKE access").')


# A path in backticks that starts with `docs/` is this repository's page; another project's is
# written with that project's name first (`cluster-autoscaler/docs/dra_support.md`).
DOCS_PATH = re.compile(r"`(docs/[\w./-]+\.md)")
# What a reader of a clone has: the README, the quickstarts and the pages they lead to, the
# examples, and what the packages ship. `../shared` (the tests' material, docs/testing.md) is
# beside the developers' clone only, never in a reader's.
READER_FILES = (
    "README.md",
    "docs/quickstart/*.md",
    "docs/scope.md",
    "docs/smoke-test.md",
    "examples/**/*.yaml",
    "package/**/*.yaml",
)
OUTSIDE = re.compile(r"\.\./shared\b")


def missing_doc_paths(text: str) -> set[str]:
    return {p for p in DOCS_PATH.findall(text) if not (ROOT / p).is_file()}


def reader_files() -> list[Path]:
    return sorted({p for pattern in READER_FILES for p in ROOT.glob(pattern)})


def test_every_docs_path_the_docs_name_exists():
    missing = {name: sorted(missing_doc_paths(t)) for name, t in texts().items()}
    missing = {name: paths for name, paths in missing.items() if paths}
    assert not missing, (
        f"docs/ pages named that do not exist (another project's? name it): {missing}"
    )


def test_what_a_reader_of_a_clone_has_points_inside_the_clone():
    files = reader_files()
    assert ROOT / "package" / "configuration" / "crossplane.yaml" in files
    outside = [str(p.relative_to(ROOT)) for p in files if OUTSIDE.search(p.read_text())]
    assert not outside, f"paths outside the repository: {outside}"


def test_a_missing_docs_path_is_caught():
    text = "see `docs/status.md`, `docs/cni-proposal.md` and `amazon-vpc-cni-k8s/docs/x.md`"
    assert missing_doc_paths(text) == {"docs/cni-proposal.md"}
    assert OUTSIDE.search("(../shared/crds/SOURCES.md)")
