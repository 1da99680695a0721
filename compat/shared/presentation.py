"""How a known breakage presents itself, written once for every output (griffe's Breakage.explain is
the model): `Breakage.explain(style)` (compat.shared.breakages) calls `explain_breakage`.

Styles:
- `one-line`: id, title and where it applies, for a log line or a summary;
- `text`: the lines `nox -s explain` prints under an exception it matched;
- `markdown`: one list item's worth of safe Markdown (compat.shared.markdown) for compat.md;
- `html`: the registry block of a probe in compat.html (escaped Markup);
- `junit`: the lines a JUnit failure's body carries;
- `github`: a workflow `::notice` annotation.
`seen` is the failure as observed (`Type: message`), put first where the style has room for it.
"""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup, escape

from compat.shared.markdown import Md, md_code, md_escape

Breakage = Any  # compat.shared.breakages.Breakage (its model module imports this one to present it)
STYLES = ("one-line", "text", "markdown", "html", "junit", "github")
_GITHUB_REF = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")


def reference_url(text: str) -> str | None:
    """`owner/repo#123` -> its GitHub address; None for any other reference (e.g. docs/findings.md#id)."""
    m = _GITHUB_REF.match(text.strip())
    return f"https://github.com/{m.group(1)}/issues/{m.group(2)}" if m else None


def _since(entry: Breakage) -> str:
    return f"since vLLM {entry.introduced_in}" + (f", gone in {entry.removed_in}" if entry.removed_in else "")


def _observed(entry: Breakage) -> str:
    return ", ".join(entry.backends) or "no backend (inferred)"


def symptom_text(entry: Breakage) -> str:
    return entry.symptom.description or f"{'/'.join(entry.symptom.exception)}: /{entry.symptom.message}/"


def _gh(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def explain_breakage(entry: Breakage, style: str = "one-line", seen: str = "") -> Any:
    if style == "one-line":
        return (f"{entry.id}: {entry.title} ({_since(entry)}; speculators {entry.affects}; observed on "
                f"{_observed(entry)})")
    if style == "text":
        return "\n".join([
            f"  known breakage {entry.id}: {entry.title}",
            f"    {_since(entry)}; speculators {entry.affects}; observed on {_observed(entry)}",
            f"    fix: {entry.fix}",
            *(f"    see: {ref}" for ref in entry.references),
        ])
    if style == "markdown":
        refs = "; ".join(f"[{md_escape(r)}]({url})" if (url := reference_url(r)) else md_escape(r)
                         for r in entry.references)
        return Md(f"known {md_code(entry.id)}: {md_escape(entry.fix, 300)}" + (f" (see {refs})" if refs else ""))
    if style == "html":
        refs = Markup("; ").join(
            Markup('<a href="{}" rel="noreferrer">{}</a>').format(url, r) if (url := reference_url(r)) else escape(r)
            for r in entry.references)
        gone = Markup(" (gone in {})").format(entry.removed_in) if entry.removed_in else ""
        return Markup(
            '<div class="entry">\n'
            '    <div class="entry-title">Registry: <strong>{title}</strong> <code>{id}</code></div>\n'
            '    <dl>\n'
            '      <div><dt>introduced in</dt><dd>vLLM {since}{gone}</dd></div>\n'
            '      <div><dt>affects</dt><dd>speculators {affects}</dd></div>\n'
            '      <div><dt>symptom</dt><dd>{symptom}</dd></div>\n'
            '      <div><dt>fix</dt><dd>{fix}</dd></div>\n'
            '{refs}'
            '    </dl>\n'
            '  </div>').format(
                title=entry.title, id=entry.id, since=entry.introduced_in, gone=gone, affects=entry.affects,
                symptom=symptom_text(entry), fix=entry.fix,
                refs=Markup("      <div><dt>references</dt><dd>{}</dd></div>\n").format(refs) if entry.references
                else "")
    if style == "junit":
        return "\n".join([
            f"known breakage {entry.id}: {entry.title}",
            f"scope: {entry.scope()}",
            f"fix: {entry.fix}",
            *(f"see: {ref}" for ref in entry.references),
        ])
    if style == "github":
        body = "\n".join(x for x in (seen, entry.title, f"fix: {entry.fix}") if x)
        return f"::notice title=known breakage {entry.id}::{_gh(body)}"
    raise ValueError(f"explain style {style!r}: expected one of {', '.join(STYLES)}")
