"""The report's opening section: "which vLLM works with my speculators?" (issue 22 item 3).

From the support documents (compat.harness.support_run: results/support/*.json, or the one a run
just made): per speculators release the vLLM ranges that work as released, with the compat
adapters, untested, broken, in browser-compat-data's words (version_added / version_removed), then
every cell of the row. Each cell says its outcome and how it was found with a symbol and a word
(colour never alone): measured, inferred (named source and fingerprint), static only, resolver
(pins conflict). A broken cell names the nearest working pair and the fix. Footnotes carry the
inference sources, fixes and which model runner serves extract_hidden_states. Runs of the same pair
on the other backend (a cell's `elsewhere`, compat.harness.support.with_other_backends) get their own
column and a mark in the cell; the row's outcome stays its own backend's.

    fragments(documents) -> {"html": Markup, "markdown": str}   # "" each when there is none

The documents (a report's `support`: its JSON) are read typed once, at `fragments`
(compat.harness.documents.SupportDocument); everything below reads the typed cells.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from markupsafe import Markup, escape
from packaging.version import Version

from compat.harness.documents import CandidateBuild, ContractSpan, Outcome, SupportCell, SupportDocument, load_support

OUTCOME_SYMBOLS = {"works": "✔", "adapters": "◐", "untested": "?", "broken": "✖"}
OUTCOME_WORDS = {"works": "works as released", "adapters": "works with the compat adapters",
                 "untested": "untested", "broken": "broken"}
SHORT_WORDS = {"works": "as released", "adapters": "with adapters", "untested": "untested", "broken": "broken"}
PROVENANCE_SYMBOLS = {"measured": "●", "inferred": "≈", "static-only": "⊙", "resolver": "⊘", "nearest-kernels": "◍"}
PROVENANCE_WORDS = {"measured": "measured", "inferred": "inferred", "static-only": "static only",
                    "resolver": "pins conflict", "nearest-kernels": "runtime, nearest kernels"}

STYLE = """
#support ol.strip { list-style: none; display: grid; grid-template-columns: repeat(auto-fill, minmax(6.4rem, 1fr));
  gap: 3px; padding: 0; margin: .3rem 0 .8rem; }
#support ol.strip li { font-size: .72rem; line-height: 1.25; padding: 1px 4px; border-radius: 3px; }
#support ol.strip .word { display: block; }
#support .o-works { background: #dff3e0; } #support .o-adapters { background: #fff4cc; }
#support .o-untested { background: #eeeeee; } #support .o-broken { background: #f9d6d5; }
#support .p-inferred { border: 2px dashed #777; } #support .p-measured { border: 2px solid #333; }
#support .p-static-only { border: 2px dotted #999; font-style: italic; } #support .p-resolver { border: 2px double #933; }
#support .foot { font-size: .8rem; }
#support table.answers { font-size: .75rem; line-height: 1.3; margin: .25rem 0 .75rem; width: 100%; }
#support table.answers td, #support table.answers th { vertical-align: top; padding: 1px 4px; }
#support table.answers caption { text-align: left; font-weight: 600; } #support .nw { white-space: nowrap; }
"""  # noqa: E501 - the stylesheet is written into the committed reports as it stands


def _documents(documents: SupportDocument | Mapping[str, Any] | Iterable[Any] | None) -> list[SupportDocument]:
    """The documents that hold cells, typed (a report's JSON: read here, once)."""
    if not documents:
        return []
    docs = [documents] if isinstance(documents, (SupportDocument, Mapping)) else list(documents)
    typed = [d if isinstance(d, SupportDocument) else load_support(d, "the report's support")
             for d in docs if isinstance(d, SupportDocument) or (isinstance(d, Mapping) and "cells" in d)]
    return [d for d in typed if d.cells]


def _rows(docs: list[SupportDocument]) -> dict[str, list[SupportCell]]:
    """Cells by speculators release (rows), each in vLLM order; a later document's cell wins."""
    rows: dict[str, dict[str, SupportCell]] = {}
    for doc in docs:
        for cell in doc.cells:
            rows.setdefault(cell.speculators, {})[cell.vllm] = cell
    return {s: sorted(cells.values(), key=lambda c: Version(c.vllm))
            for s, cells in sorted(rows.items(), key=lambda kv: Version(kv[0]))}


def outcome_ranges(cells: list[SupportCell]) -> dict[str, list[dict[str, Any]]]:
    """Per outcome its runs of consecutive vLLM releases: version_added, version_last, version_removed,
    and for a broken run the nearest working pairs its cells name (`instead`)."""
    out: dict[str, list[dict[str, Any]]] = {o: [] for o in OUTCOME_SYMBOLS}
    for i, cell in enumerate(cells):
        if i and cells[i - 1].outcome is cell.outcome:
            continue
        j = i
        while j + 1 < len(cells) and cells[j + 1].outcome is cell.outcome:
            j += 1
        out[cell.outcome.value].append({
            "version_added": cell.vllm, "version_last": cells[j].vllm,
            "version_removed": cells[j + 1].vllm if j + 1 < len(cells) else None,
            "provenance": sorted({c.provenance.value for c in cells[i:j + 1]}),
            "instead": list(dict.fromkeys(c.nearest for c in cells[i:j + 1] if c.nearest))})
    return out


def _span(r: dict[str, Any]) -> str:
    first, last = r["version_added"], r["version_last"]
    return str(first) if first == last else f"{first} – {last}"


def _range_text(r: dict[str, Any], spec: str = "") -> str:
    """A run of releases as the answer line says it; in a row its own speculators release is not repeated."""
    span = r["version_added"] if r["version_added"] == r["version_last"] else (f"{r['version_added']} – "
                                                                               f"{r['version_last']}")
    pairs = [p.replace(f" x speculators {spec} (", " (") if spec else p for p in r["instead"]]
    instead = f" → install instead: {' or '.join(pairs)}" if pairs else ""
    return f"{span} ({', '.join(PROVENANCE_WORDS[p] for p in r['provenance'])}){instead}"


def cell_text(cell: SupportCell) -> str:
    """The cell as words: outcome and provenance, never colour alone."""
    outcome, provenance = cell.outcome.value, cell.provenance.value
    return f"{OUTCOME_SYMBOLS[outcome]}{PROVENANCE_SYMBOLS[provenance]} " \
           f"{OUTCOME_WORDS[outcome]} · {PROVENANCE_WORDS[provenance]}"


def footnote(cell: SupportCell, runner: str = "") -> str:
    parts = [f"vLLM {cell.vllm} x speculators {cell.speculators}: {OUTCOME_WORDS[cell.outcome.value]}, "
             f"{PROVENANCE_WORDS[cell.provenance.value]} ({cell.verdict.value})"]
    parts += [str(n) for n in cell.notes if n][:2]
    if cell.check is not None:
        parts.append(cell.check.text)
    if cell.outcome is Outcome.BROKEN:
        if cell.nearest:
            parts.append(f"install instead: {cell.nearest}")
        if cell.fix:
            parts.append(f"fix: {cell.fix}")
    parts += [f"also measured on {r.backend}: {OUTCOME_WORDS[r.outcome.value]} ({r.verdict}, {r.cell_id})"
              for r in cell.elsewhere]
    if runner:
        parts.append(f"model runner: {runner}")
    return "; ".join(parts)


def elsewhere_text(group: dict[str, list[SupportCell]]) -> str:
    """What runs on the other backend decided for these rows' releases: `gpu: 0.23.0 ◐ (0.6.0.1), 0.24.0 ✔`;
    a pair run for only some of the rows an answer line joins names them."""
    found: dict[str, dict[str, list[str]]] = {}
    for spec, cells in group.items():
        for cell in cells:
            for r in cell.elsewhere:
                item = f"{cell.vllm} {OUTCOME_SYMBOLS[r.outcome.value]}"
                found.setdefault(r.backend, {}).setdefault(item, []).append(spec)
    return " · ".join(f"{backend}: " + ", ".join(
        item + ("" if len(specs) == len(group) else f" ({', '.join(specs)})")
        for item, specs in sorted(items.items(), key=lambda kv: Version(kv[0].split()[0])))
        for backend, items in found.items())


def outcome_text(ranges: list[dict[str, Any]]) -> str:
    """One outcome's runs of a row, each with how it was found; what to install instead said once, after
    them: the newest working pair the broken cells name (each cell's own nearest pair is in its footnote)."""
    if not ranges:
        return "none"
    text = "; ".join(_span(r) + " " + "".join(PROVENANCE_SYMBOLS[p] for p in r["provenance"]) for r in ranges)
    pairs = {_pair_symbols(p): p.split()[1] for r in ranges for p in r["instead"]}
    newest = max(pairs, key=lambda p: (Version(pairs[p]), PROVENANCE_SYMBOLS["measured"] in p)) if pairs else ""
    return text + (f" → install instead: {newest}" if newest else "")


NEAREST = re.compile(r"vLLM (?P<vllm>\S+) x speculators \S+ \((?P<how>as released|with the compat adapters), "
                     r"(?P<provenance>[^)]+)\)")
HOW_SYMBOLS = {"as released": OUTCOME_SYMBOLS["works"], "with the compat adapters": OUTCOME_SYMBOLS["adapters"]}


def _pair_symbols(pair: str) -> str:
    """A row's nearest working pair in the answer line's symbols: `vLLM 0.31.0 ✔●` (the words, as the
    cell's footnote says them, where the pair is not in the support document's form)."""
    m = NEAREST.fullmatch(pair)
    symbol = {w: s for s, w in PROVENANCE_WORDS.items()}.get(m["provenance"]) if m else None
    if not m or symbol is None:
        return pair
    return f"vLLM {m['vllm']} {HOW_SYMBOLS[m['how']]}{PROVENANCE_SYMBOLS[symbol]}"


def answer_lines(rows: dict[str, list[SupportCell]], elsewhere: bool,
                 candidates: Iterable[str] = ()) -> list[tuple[list[str], list[str]]]:
    """The answer's lines: per speculators release its outcome texts (and the other backend's). Neighbouring
    releases whose outcomes cover the same vLLM ranges share one line (0.6.0, 0.6.0.1, 0.6.0.2), so the
    answer stays in one screen as releases come: a range's symbols are the union of how their cells were
    found, what to install instead the newest pair any of them names (measured first). A candidate build
    (`candidates`) shares no line: it stands apart from the released rows."""
    groups: list[tuple[tuple[Any, ...], list[str]]] = []
    for spec, cells in rows.items():
        ranges = outcome_ranges(cells)
        key: tuple[Any, ...] = tuple((o, r["version_added"], r["version_last"]) for o in OUTCOME_SYMBOLS
                                     for r in ranges[o])
        key += ((CANDIDATE_WORD, spec),) if spec in candidates else ()
        if groups and groups[-1][0] == key:
            groups[-1][1].append(spec)
        else:
            groups.append((key, [spec]))
    lines = []
    for _key, specs in groups:
        members = [outcome_ranges(rows[s]) for s in specs]
        texts = [outcome_text([dict(r, provenance=sorted({p for m in members for p in m[o][i]["provenance"]}),
                                    instead=[x for m in members for x in m[o][i]["instead"]])
                               for i, r in enumerate(members[0][o])]) for o in OUTCOME_SYMBOLS]
        lines.append((specs, texts + ([elsewhere_text({s: rows[s] for s in specs}) or "none"] if elsewhere else [])))
    return lines


def _any_elsewhere(rows: dict[str, list[SupportCell]]) -> bool:
    return any(cell.elsewhere for cells in rows.values() for cell in cells)


def _runners(docs: list[SupportDocument]) -> dict[str, str]:
    out: dict[str, str] = {}
    for doc in docs:
        out.update(doc.model_runners)
    return out


def _contracts(docs: list[SupportDocument]) -> dict[str, dict[str, list[ContractSpan]]]:
    """speculators release -> its contracts' support along the vLLM releases (rows only)."""
    return {d.fixed: d.contracts for d in docs if d.axis == "vllm"}


def contract_text(runs: list[ContractSpan]) -> str:
    if not runs:
        return "holds on no vLLM release read"
    return ", ".join(f"version_added {r.version_added}, version_removed {r.version_removed or 'none (holds)'}"
                     for r in runs)


CANDIDATE_WORD = "candidate"


def _candidates(docs: list[SupportDocument]) -> dict[str, CandidateBuild]:
    """The rows of candidate builds (compat.harness.candidate): version -> its wheel and sha256."""
    return {d.fixed: d.candidate for d in docs if d.axis == "vllm" and d.candidate is not None}


def spec_label(spec: str, candidates: Mapping[str, CandidateBuild]) -> str:
    return f"{spec} ({CANDIDATE_WORD})" if spec in candidates else spec


def candidate_lines(docs: list[SupportDocument]) -> list[str]:
    """What the answer says first of each candidate row: a build, not a release, apart from the table."""
    out = []
    for doc in docs:
        info = doc.candidate
        if doc.axis != "vllm" or info is None:
            continue
        span = doc.vllm_range
        out.append(f"Candidate speculators {doc.fixed}: the build {info.wheel} (sha256 "
                   f"{str(info.sha256)[:16]}…), not a release; against vLLM "
                   + (f"{span[0]} – {span[1]}" if span else "every release")
                   + f" on {doc.backend}. Its cells are inferred only from its own runs, and it is "
                   "reported apart from the released rows (never published).")
    return out


def fragments(documents: Any, markdown_type: Callable[[str], str] = str) -> dict[str, Any]:
    """The section as HTML (Markup) and Markdown (`markdown_type`: the renderer's safe-Markdown string)."""
    docs = _documents(documents)
    if not docs:
        return {"html": Markup(""), "markdown": markdown_type("")}
    rows, runners = _rows(docs), _runners(docs)
    return {"html": _html(rows, runners, docs), "markdown": markdown_type(_markdown(rows, runners, docs))}


def _agreements(docs: Iterable[SupportDocument]) -> list[str]:
    out = []
    for doc in docs:
        a = doc.agreement
        if a is not None and a.checked:
            out.append(f"{doc.axis == 'vllm' and 'speculators ' + doc.fixed or 'vLLM ' + doc.fixed}: "
                       f"inference checked on {a.checked} cell(s) (seed {doc.seed}), {a.agree} agree"
                       + "".join(f"; {d}" for d in a.disagreements))
    return out


def _unbroken(text: str) -> Markup:
    """An answer cell whose lines break only between its ranges (and before what to install instead),
    never inside `0.25.0 – 0.32.0 ≈●`."""
    parts = re.split(r"(; |, | (?=→ ))", text)
    return Markup("").join(escape(p) if i % 2 else Markup('<span class="nw">%s</span>') % p
                           for i, p in enumerate(parts))


def _html(rows: dict[str, list[SupportCell]], runners: dict[str, str], docs: list[SupportDocument]) -> Markup:
    e = escape
    elsewhere = _any_elsewhere(rows)
    out = [f"<style>{STYLE}</style>", '<section id="support" aria-labelledby="support-h">',
           '<h2 id="support-h">Which vLLM works with my speculators?</h2>']
    out.append('<table class="answers"><caption>One line per speculators release (neighbours with the same ranges '
               'share one) · '
               '● measured ≈ inferred ⊙ static only ⊘ pins conflict</caption>'
               '<thead><tr><th scope="col">speculators</th>'
               + "".join(f'<th scope="col">{OUTCOME_SYMBOLS[o]} {e(OUTCOME_WORDS[o])}</th>' for o in OUTCOME_SYMBOLS)
               + ('<th scope="col">measured on the other backend</th>' if elsewhere else "")
               + "</tr></thead><tbody>")
    candidates = _candidates(docs)
    out[3:3] = [f'<p class="candidate"><strong>{e(line)}</strong></p>' for line in candidate_lines(docs)]
    for specs, texts in answer_lines(rows, elsewhere, candidates):
        out.append('<tr><th scope="row">' + ", ".join(f'<a href="#support-{e(spec)}">{e(spec_label(spec, candidates))}'
                                                      '</a>' for spec in specs)
                   + "</th>"
                   + "".join(f'<td class="o-{o}">{_unbroken(text)}</td>' for o, text in zip(OUTCOME_SYMBOLS, texts))
                   + (f'<td class="elsewhere">{_unbroken(texts[-1])}</td>' if elsewhere else "") + "</tr>")
    out.append("</tbody></table>")
    out.append('<p class="hint">Each cell below: outcome (✔ works as released, ◐ with the compat adapters, ? untested, '
               '✖ broken) and how it was found (● measured, ≈ inferred from a measured cell with the same '
               'extraction-path fingerprint, ⊙ static only, ⊘ pins conflict). Footnotes name sources and fixes.</p>')
    notes: list[str] = []
    for spec, cells in rows.items():
        out.append(f'<h3 id="support-{e(spec)}">speculators {e(spec_label(spec, candidates))}</h3>')
        contracts = _contracts(docs).get(spec) or {}
        if contracts:
            out.append(f'<details class="foot"><summary>Per contract (static layer): {len(contracts)} that do not '
                       f'hold on every release</summary><ul>')
            out += [f"<li><code>{e(cid)}</code>: {e(contract_text(runs))}</li>" for cid, runs in contracts.items()]
            out.append("</ul></details>")
        # every release of the row at once, wrapping as the page narrows (caniuse's grid): no sideways scroll
        out.append(f'<ol class="strip" aria-label="speculators {e(spec)}: one cell per vLLM release">')
        for cell in cells:
            notes.append(footnote(cell, runners.get(cell.vllm, "")))
            n = len(notes)
            outcome, provenance = cell.outcome.value, cell.provenance.value
            out.append(f'<li class="o-{e(outcome)} p-{e(provenance)}" '
                       f'title="{e(cell_text(cell))}" data-vllm="{e(cell.vllm)}">'
                       f'<b>{e(cell.vllm)}</b> '
                       f'<span>{OUTCOME_SYMBOLS[outcome]}{PROVENANCE_SYMBOLS[provenance]}</span>'
                       f' <span class="word">{e(outcome)} · {e(PROVENANCE_WORDS[provenance])}</span>'
                       + "".join(f' <span class="word">{e(r.backend)} {OUTCOME_SYMBOLS[r.outcome.value]}</span>'
                                 for r in cell.elsewhere)
                       + f'<sup><a href="#support-note-{n}">{n}</a></sup></li>')
        out.append("</ol>")
    for line in _agreements(docs):
        out.append(f"<p>{e(line)}</p>")
    out.append('<details class="foot"><summary>Footnotes (sources, fixes, model runner)</summary><ol>')
    out += [f'<li id="support-note-{i}">{e(text)}</li>' for i, text in enumerate(notes, 1)]
    out.append("</ol></details></section>")
    return Markup("".join(out))


def _md(text: str) -> str:
    return "".join("\\" + ch if ch in "\\`*_[]<>|~$#!" else ch for ch in " ".join(str(text).split())) \
        .replace("&", "&amp;")


def _markdown(rows: dict[str, list[SupportCell]], runners: dict[str, str], docs: list[SupportDocument]) -> str:
    elsewhere = _any_elsewhere(rows)
    candidates = _candidates(docs)
    out = ["## Which vLLM works with my speculators?", "",
           *[f"**{_md(line)}**\n" for line in candidate_lines(docs)],
           "✔ works as released · ◐ with the compat adapters · ? untested · ✖ broken; "
           "● measured · ≈ inferred (same extraction-path fingerprint as a measured cell) · ⊙ static only · "
           "⊘ pins conflict", "",
           "| speculators | " + " | ".join(f"{OUTCOME_SYMBOLS[o]} {OUTCOME_WORDS[o]}" for o in OUTCOME_SYMBOLS)
           + (" | measured on the other backend" if elsewhere else "") + " |",
           "|---" * (1 + len(OUTCOME_SYMBOLS) + elsewhere) + "|"]
    for spec, cells in rows.items():
        ranges = outcome_ranges(cells)
        out.append(f"| {_md(spec_label(spec, candidates))} | "
                   + " | ".join(_md("; ".join(_range_text(r, spec) for r in ranges[o]) or "none")
                                for o in OUTCOME_SYMBOLS)
                   + (f" | {_md(elsewhere_text({spec: cells}) or 'none')}" if elsewhere else "") + " |")
    out.append("")
    for spec, cells in rows.items():
        out.append(f"### speculators {_md(spec_label(spec, candidates))}")
        out.append("")
        out.append("| vLLM | cell | notes |")
        out.append("|---|---|---|")
        for cell in cells:
            out.append(f"| {_md(cell.vllm)} | {_md(cell_text(cell))} | "
                       f"{_md(footnote(cell, runners.get(cell.vllm, ''))[:400])} |")
        out.append("")
        contracts = _contracts(docs).get(spec) or {}
        if contracts:
            out.append("Per contract (static layer), where it does not hold on every release:")
            out.append("")
            out += [f"- {_md(cid)}: {_md(contract_text(runs))}" for cid, runs in contracts.items()]
            out.append("")
    out += [f"- {_md(line)}" for line in _agreements(docs)]
    return "\n".join(out) + "\n"
