"""The full static table: every vLLM release x every speculators release, one verdict per pair.

Each release's wheel is read once (sources cache), each speculators release's uses once, and each
vLLM module parsed once for all releases whose wheels hold the same file (api.parsed).
"""

from __future__ import annotations

import time
from typing import Any

from packaging.version import Version

from compat.harness.static.api import Api
from compat.harness.static.check import Release, check_pair_findings, load_release, verdict_of
from compat.harness.static.contract_history import SINCE, vllm_releases
from compat.harness.static.finding import Finding
from compat.harness.static.sources import SourceCache, StaticError

SPECULATORS_SINCE = "0.3.0"


def speculators_releases(cache: SourceCache, since: str = SPECULATORS_SINCE) -> list[str]:
    return [r for r in cache.releases("speculators")
            if not Version(r).is_prerelease and Version(r) >= Version(since)]


def static_table(cache: SourceCache | None = None, vllm: list[str] | None = None,
                 speculators: list[str] | None = None, detail: bool = False) -> dict[str, Any]:
    """`detail`: each pair also keeps every contract's outcome (`outcomes`: id -> worst outcome)."""
    cache = cache or SourceCache()
    started = time.monotonic()
    vllm = vllm or vllm_releases(cache, SINCE)
    speculators = speculators or speculators_releases(cache)
    releases: dict[str, Release | StaticError] = {}
    apis: dict[str, Api | StaticError] = {}
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for s in speculators:
        try:
            releases[s] = load_release(s, cache)
        except StaticError as exc:
            releases[s] = exc
    fetched = time.monotonic()
    reference = Api(cache.get("vllm", vllm[-1]))
    for v in vllm:
        try:
            apis[v] = Api(cache.get("vllm", v))
        except StaticError as exc:
            apis[v] = exc
    read = time.monotonic()
    for v in vllm:
        for s in speculators:
            api, release = apis[v], releases[s]
            if isinstance(api, StaticError) or isinstance(release, StaticError):
                error = api if isinstance(api, StaticError) else release
                rows.setdefault(v, {})[s] = {"verdict": "error", "error": str(error)}
                continue
            findings = check_pair_findings(release, api, reference)
            broken = [f for f in findings if f.outcome == "broken"]
            rows.setdefault(v, {})[s] = {"verdict": verdict_of(findings), "contracts": len(findings),
                                         "broken": len(broken),
                                         "broken_contracts": sorted({f.use.id for f in broken}),
                                         "broken_lines": [f.line() for f in broken]}
            if detail:
                rows[v][s]["outcomes"] = _worst_outcomes(findings)
    done = time.monotonic()
    return {"vllm": vllm, "speculators": speculators, "rows": rows,
            "seconds": {"speculators_wheels": round(fetched - started, 1), "vllm_wheels": round(read - fetched, 1),
                        "checks": round(done - read, 1), "total": round(done - started, 1)},
            "fetch": dict(cache.stats)}


def _worst_outcomes(findings: list[Finding]) -> dict[str, str]:
    order = ("broken", "guarded", "unknown", "ok")
    out: dict[str, str] = {}
    for f in findings:
        current = out.get(f.use.id)
        if current is None or order.index(f.outcome) < order.index(current):
            out[f.use.id] = f.outcome
    return out
