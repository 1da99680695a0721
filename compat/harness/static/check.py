"""Each use of vLLM by a speculators release, checked against one vLLM release: findings, verdict.

A finding is one line in the griffe manner: the vLLM file:line, the object, what is wrong there
and the signature as this release has it, then where the release uses it. Outcomes:
- `ok`: the name exists and the call binds (or the override takes what the base declares);
- `broken`: the name is missing (with where it is defined now, if anywhere), the call does not
  bind (Python's rules: unexpected keyword, missing required argument, too many positional), an
  override's base method is gone (vLLM never calls it) or takes arguments the override cannot;
- `guarded`: broken, but the import sits inside `try/except ImportError` (the release copes);
- `unknown`: not decidable from the sources (a base class or re-export from outside vLLM, a
  module `__getattr__`); listed, never counted as a break;
- `own-method`: a method of the release's subclass that no vLLM release we read defines (not an
  override; not listed).
The static verdict of the pair: `api-incompatible` when any contract is `broken`, else
`api-compatible`; `error` when a wheel could not be read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from compat.harness.static.api import Api, Signature
from compat.harness.static.finding import Finding
from compat.harness.static.serve import check_serve, serve_uses
from compat.harness.static.sources import SourceCache, StaticError, WheelSources
from compat.harness.static.uses import Use, uses_of

COUNTED = ("broken",)


def check_use(use: Use, api: Api, reference: Api | None = None) -> Finding:
    if use.kind == "override":
        return _check_override(use, api, reference)
    found = api.lookup(use.target)
    if found.kind == "missing":
        moved = tuple(api.where_defined(use.target.rsplit(".", 1)[-1]))
        outcome = "guarded" if use.guarded else "broken"
        return Finding(use, outcome, f"{use.target.rsplit('.', 1)[-1]} is not there: {found.why}", found.where,
                       moved_to=moved)
    if found.kind in ("unknown", "external"):
        return Finding(use, "unknown", found.why or found.kind, found.where)
    if use.kind in ("call", "method"):
        signature = api.signature(found)
        if signature is None:
            return Finding(use, "unknown", f"{found.kind} {found.name}: its signature cannot be read", found.where)
        problems = signature.bind(use.npos, use.keywords, use.star, use.starstar)
        if problems:
            return Finding(use, "broken", "; ".join(problems), f"{signature.file}:{signature.line}",
                           signature=signature.text())
        ignored = signature.ignored(use.keywords)
        what = (f"ok, but {', '.join(map(repr, ignored))} taken by no field: this pydantic class ignores it"
                if ignored else "ok")
        return Finding(use, "ok", what, f"{signature.file}:{signature.line}", signature=signature.text())
    return Finding(use, "ok", "ok", found.where)


def _check_override(use: Use, api: Api, reference: Api | None) -> Finding:
    method = use.target.rsplit(".", 1)[-1]
    candidates = [use.target] + [f"{b}.{method}" for b in use.other_bases]
    found = next((f for f in (api.lookup(c) for c in candidates) if f.kind == "function"), None)
    if found is None:
        unknown = next((f for f in (api.lookup(c) for c in candidates) if f.kind == "unknown"), None)
        if unknown is not None:
            return Finding(use, "unknown", unknown.why, unknown.where)
        if reference is not None and any(reference.lookup(c).kind == "function" for c in candidates):
            base = api.lookup(use.target.rsplit(".", 1)[0])
            return Finding(use, "broken", f"overrides {method}, which this release's base class does not define: "
                                          f"vLLM never calls the override", base.where)
        return Finding(use, "own-method", "a method of its own (no vLLM release read defines it)")
    base_sig = api.signature(found)
    own: Signature | None = use.signature
    if base_sig is None or own is None:
        return Finding(use, "unknown", "signature not readable", found.where)
    positional = [p for p in base_sig.params if p.kind in ("posonly", "pos")]
    keywords = tuple(p.name for p in base_sig.params if p.kind == "kwonly")
    problems = own.bind(len(positional), keywords)
    if problems:
        return Finding(use, "broken", f"the override cannot take what the base declares: {'; '.join(problems)}",
                       f"{base_sig.file}:{base_sig.line}", signature=base_sig.text())
    return Finding(use, "ok", "ok", f"{base_sig.file}:{base_sig.line}", signature=base_sig.text())


def verdict_of(findings: list[Finding]) -> str:
    return "api-incompatible" if any(f.outcome in COUNTED for f in findings) else "api-compatible"


def companion_version(speculators: WheelSources, name: str, cache: SourceCache) -> str | None:
    """The release of `name` (hs-connectors) the speculators wheel requires: its pin, else the
    highest release its specifier admits."""
    for line in speculators.metadata().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if req.name.replace("_", "-").lower() != name or (req.marker and "extra" in str(req.marker)):
            continue
        releases = [r for r in cache.releases(name) if req.specifier.contains(r, prereleases=False)]
        return max(releases, key=Version) if releases else None
    return None


@dataclass
class Release:
    """A speculators release's uses of vLLM (its own and its hs-connectors'), read once."""

    speculators: WheelSources
    companions: list[WheelSources]
    uses: list[Use]

    def describe(self) -> dict[str, Any]:
        return {"speculators": self.speculators.describe(), "companions": [c.describe() for c in self.companions]}


def load_release(version: str, cache: SourceCache) -> Release:
    spec = cache.get("speculators", version)
    uses = uses_of(spec, ("speculators",))
    companions = []
    hs_version = companion_version(spec, "hs-connectors", cache)
    if hs_version:
        hs = cache.get("hs-connectors", hs_version)
        companions.append(hs)
        uses += uses_of(hs, ("hs_connectors",))
    uses += serve_uses(version)
    return Release(spec, companions, uses)


def check_pair_findings(release: Release, api: Api, reference: Api | None = None) -> list[Finding]:
    """Every contract of the release against this vLLM release (methods of its own left out)."""
    findings = [check_serve(u, api) if u.kind in ("flag", "config-key") else check_use(u, api, reference)
                for u in release.uses]
    return [f for f in findings if f.outcome != "own-method"]


def check_pair(release: Release, api: Api, reference: Api | None = None) -> dict[str, Any]:
    """The static result of (vLLM release, speculators release): verdict, every finding."""
    started = time.monotonic()
    listed = check_pair_findings(release, api, reference)
    return {
        "verdict": verdict_of(listed),
        "vllm": api.sources.describe(),
        **release.describe(),
        "contracts": len(listed),
        "broken": [f.line() for f in listed if f.outcome == "broken"],
        "guarded": [f.line() for f in listed if f.outcome == "guarded"],
        "unknown": [f.line() for f in listed if f.outcome == "unknown"],
        "findings": [f.as_dict() for f in listed],
        "seconds": round(time.monotonic() - started, 2),
    }


def static_result(vllm: str, speculators: str, cache: SourceCache | None = None, vllm_wheel: str = "",
                  reference: str | None = None, speculators_wheel: str = "") -> dict[str, Any]:
    """`check_pair` for versions (or a local vLLM wheel, a candidate speculators wheel); a wheel that cannot
    be read gives verdict `error` with why. `reference`: the vLLM release that tells an override from a
    method of its own (default: the newest release on the index)."""
    cache = cache or SourceCache()
    try:
        from compat.harness.static.sources import local_wheel

        if speculators_wheel:
            cache.add_local(Path(speculators_wheel))
        sources = local_wheel(Path(vllm_wheel)) if vllm_wheel else cache.get("vllm", vllm)
        api = Api(sources)
        release = load_release(speculators, cache)
        newest = reference or max(cache.releases("vllm"), key=Version)
        ref_api = api if newest == sources.version else Api(cache.get("vllm", newest))
        return check_pair(release, api, ref_api)
    except StaticError as exc:
        return {"verdict": "error", "error": str(exc), "broken": [], "findings": []}
