"""What a provider says went wrong with a composed resource, in its own words, for the XR to show.

A managed resource its provider cannot reconcile reports `Synced=False` (reason ReconcileError)
with the cloud's or the API server's message ("InvalidParameterException: ...", "admission webhook
denied ..."); a Helm release whose install or upgrade failed says so in `status.atProvider`
(`state: failed`, `releaseDescription`). Without this the XR only ever says that it waits.

The message shown is the provider's first line, whitespace folded, bounded, and scrubbed of
anything shaped like secret material (PEM blocks, credentials after their key, tokens, long
base64), so the same observation always gives the same words and never a secret.
"""

import re
from collections.abc import Collection, Mapping

from function.inputs import ObservedResource
from function.output import Desired, Result

# Characters of a provider's message carried onto the XR (conditions and Warnings). A longer one
# keeps its start (what the provider was doing) and its end, where upjet and provider-kubernetes put
# the cause after their prefixes ("async create failed: failed to create the resource: [{0 creating
# ...: operation error ...: InvalidParameterException: <the cause>}]").
LIMIT = 300
HEAD = 100
CUT = " ... "
# provider-kubernetes reports an Observe-only Object whose object does not exist as Synced=False,
# "cannot observe external resource: external resource does not exist" (crossplane-runtime v2.1
# managed reconciler, ShouldOnlyObserve).
DOES_NOT_EXIST = "external resource does not exist"
REDACTED = "[redacted]"
# Crossplane's Usage controller says what goes wrong only in events on the Usage and sets no Synced
# condition (crossplane v2.3.4 internal/controller/protection/usage/reconciler.go:
# status.MarkConditions(xpv2.Available()) is all it writes): nothing failure() reads is ever
# there, so Usages and ClusterUsages are not read for it (half the resources of a large cluster).
SILENT = "protection.crossplane.io/"

_SECRETS = (
    re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|$)", re.S),
    re.compile(
        r"(?i)\b(bearer|token|password|passwd|secret|client-key-data|client-certificate-data"
        r"|private_key|api[_-]?key|access[_-]?key|authorization)(\"?\s*[:=]\s*\"?|\s+)"
        r"[^\s,;\"'}\]]+"
    ),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.?[A-Za-z0-9_-]*"),  # a JWT
    re.compile(r"[A-Za-z0-9+/]{40,}={0,2}"),  # long base64: a key or a certificate
)


def scrub(text: str) -> str:
    """text without what looks like secret material."""
    text = _SECRETS[0].sub(REDACTED, text)
    text = _SECRETS[1].sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    for pattern in _SECRETS[2:]:
        text = pattern.sub(REDACTED, text)
    return text


def words(message: object) -> str | None:
    """A provider's message as the XR shows it: scrubbed, first line, folded, bounded."""
    if not isinstance(message, str) or not message.strip():
        return None
    text = scrub(message)
    first = next((line for line in text.splitlines() if line.strip()), "")
    folded = " ".join(first.split())
    if len(folded) <= LIMIT:
        return folded
    return folded[:HEAD] + CUT + folded[len(folded) - (LIMIT - HEAD - len(CUT)) :]


def failure(seen: ObservedResource | None) -> str | None:
    """What the provider reports failing on seen, in its words, or None. Read of every composed
    resource on every call: derived once per observed version."""
    return None if seen is None else seen.derived("failure", _failure)


def _failure(seen: ObservedResource) -> str | None:
    if absent(seen):
        return None
    synced = seen.condition("Synced")
    if isinstance(synced, dict) and synced.get("status") == "False":
        return words(synced.get("message")) or synced.get("reason") or "not synced"
    # A Helm release whose install or upgrade failed (provider-helm atProvider); never Ready.
    if not seen.ready and seen.at_provider("state") == "failed":
        return words(seen.at_provider("releaseDescription")) or "release failed"
    return None


def absent(seen: ObservedResource) -> bool:
    """Whether seen only observes an object that does not exist (yet): an answer, not a failure
    (a detector's "not installed", a ConfigMap another controller has still to write)."""
    return seen.get("spec", "managementPolicies") == ["Observe"] and does_not_exist(seen)


def does_not_exist(seen: ObservedResource) -> bool:
    """Whether the provider reports the object seen stands for as not existing."""
    synced = seen.condition("Synced") or {}
    return synced.get("status") == "False" and DOES_NOT_EXIST in str(synced.get("message", ""))


def _silent(body: dict) -> bool:
    return str(body.get("apiVersion", "")).startswith(SILENT)


def warnings(
    observed: Mapping[str, ObservedResource],
    desired: Mapping[str, Desired],
    usages: Collection[str] = (),
) -> list[Result]:
    """One Warning per composed resource whose provider reports a failure, in its words, in the
    order of desired (compose_cluster's, sorted once). usages: the keys of the Usages composed,
    passed over by key: a shared body (made once a cluster, as every Usage is) is not read, since
    in a fleet what a cluster keeps is out of the CPU's caches when its composition comes."""
    out = []
    for key, want in desired.items():
        if key in usages or (not want.shared and _silent(want.body)):
            continue
        seen = observed.get(key)
        why = failure(seen)
        if why is None:
            continue
        what = f"{seen.get('kind')} {seen.get('metadata', 'name')}"
        out.append(Result("Warning", f"{key} ({what}): {why}", reason="ProviderError"))
    return out
