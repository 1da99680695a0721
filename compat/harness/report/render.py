"""Render the merged report (compat.harness.report.build): reports/compat.json, compat.html, compat.md, junit/.

    write_reports(report, Path("reports"))

The HTML is one self-contained file (inline CSS and JS, no network at view time), rendered
from templates/compat.html.j2 with autoescape on; the Markdown (templates/compat.md.j2) fits
a GitHub job summary or PR comment.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import jinja2

from compat.harness import baseline as _baseline
from compat.harness.causes import OLDER_HARNESS
from compat.harness.classify import ProbeClass, new_findings
from compat.harness.junit import cell_id, write_junit
from compat.harness.report import support_table
from compat.harness.report.build import DecidedCell, decided_cells, version_key
from compat.harness.report.server_era import server_era_view
from compat.harness.verdict import GATE_WORDS, CheckedProbe
from compat.shared.breakages import Breakage
from compat.shared.markdown import Md, md_code, md_escape
from compat.shared.neutral import neutral
from compat.shared.presentation import reference_url, symptom_text
from compat.shared.records import ProbeRecord, ProbeStatus, RecordError, build, held, to_json, typed
from compat.shared.results import write_json_atomic, write_text_atomic

TEMPLATES = Path(__file__).parent / "templates"

VERDICT_SYMBOLS = {
    "compatible": "✔",
    "compatible-with-compat": "◐",
    "incompatible": "✖",
    "error": "⚠",
    "install-error": "⊘",
    "unsupported-on-cpu": "∅",
    "untested-at-runtime": "⊙",
}
STATUS_SYMBOLS = {
    "ok": "✔",
    "broken": "✖",
    "error": "⚠",
    "skipped": "○",
    "n/a": "–",
    "unsupported-on-cpu": "∅",
    "flaky": "≈",
}
CLASS_LABELS = {
    "known": "known",
    "new": "NEW",
    "fixed": "fixed",
    "as-expected-ok": "",
    "error": "",
    "not-run": "",
}


# --------------------------------------------------------------------------- view model


def fmt_number(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) < 1e-3 or abs(value) >= 1e5:
            return f"{value:.2e}"
        return f"{value:.4g}"
    return str(value)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def figure_tables(detail: Any) -> dict[str, Any]:
    """Numeric detail as small tables: {"scalars": [(k, v)], "tables": [...], "other": [(k, text)]}.

    A dict of numbers becomes a key/value table; a dict of dicts of numbers a 2-D table
    (rows = outer keys, columns = inner keys); a list of numbers one row.
    """
    out: dict[str, Any] = {"scalars": [], "tables": [], "other": []}
    if not isinstance(detail, dict):
        if detail not in (None, {}, []):
            out["other"].append(("detail", _short(detail)))
        return out
    for key, value in detail.items():
        key = str(key)
        if _is_num(value):
            out["scalars"].append((key, fmt_number(value)))
        elif isinstance(value, dict) and value and all(_is_num(v) for v in value.values()):
            out["tables"].append(
                {"title": key, "columns": ["", "value"], "rows": [[str(k), fmt_number(v)] for k, v in value.items()]}
            )
        elif (
            isinstance(value, dict)
            and value
            and all(isinstance(v, dict) and v and all(_is_num(x) or x is None for x in v.values())
                    for v in value.values())
        ):
            cols: list[str] = []
            for inner in value.values():
                for k in inner:
                    if str(k) not in cols:
                        cols.append(str(k))
            rows = []
            for rk, inner in value.items():
                named = {str(k): v for k, v in inner.items()}
                rows.append([str(rk)] + [fmt_number(named[c]) if named.get(c) is not None else "—" for c in cols])
            out["tables"].append({"title": key, "columns": [""] + cols, "rows": rows})
        elif isinstance(value, (list, tuple)) and value and all(_is_num(v) for v in value) and len(value) <= 32:
            out["tables"].append(
                {"title": key, "columns": [str(i) for i in range(len(value))], "rows": [[fmt_number(v) for v in value]]}
            )
        elif value not in (None, "", [], {}):
            out["other"].append((key, _short(value)))
    return out


def _short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _entry_view(entry: Breakage | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "id": entry.id,
        "title": entry.title,
        "introduced_in": entry.introduced_in,
        "removed_in": entry.removed_in,
        "affects": entry.affects,
        "fix": entry.fix,
        "adapter": entry.adapter,
        "advisory": entry.advisory,
        "silent": entry.symptom.silent,
        "symptom": symptom_text(entry),
        "references": [ref_view(r) for r in entry.references],
        "notes": entry.findings,
        "html": entry.explain("html"),
        "markdown": entry.explain("markdown"),
    }


def ref_view(text: str) -> dict[str, Any]:
    return {"text": text, "url": reference_url(text)}


def _probe_view(probe: CheckedProbe, cls: ProbeClass | None, cid: str) -> dict[str, Any]:
    """What a report shows of one probe and its class (a Kimi check has none)."""
    record = probe.record
    status, kind = record.status, cls.kind if cls is not None else ""
    found = len(new_findings(cls)) if cls is not None else 0
    regression = cls.adapter_regression if cls is not None else ""
    note = cls.note if cls is not None else ""
    adapted = record.with_compat
    return {
        "listed": status in (ProbeStatus.BROKEN, ProbeStatus.ERROR) or kind == "fixed" or bool(found)
        or bool(regression),
        "new_findings": found,
        "key": record.key,
        "id": record.id,
        "case": record.case,
        "anchor": f"{cid}--{re.sub(r'[^A-Za-z0-9_-]', '_', record.key)}",
        "status": status.value,
        "status_symbol": STATUS_SYMBOLS.get(status.value, "?"),
        "with_compat": adapted.value if adapted is not None else None,
        "with_compat_symbol": STATUS_SYMBOLS.get(adapted.value, "") if adapted is not None else "",
        "with_compat_entry": cls.with_compat_known.id if cls is not None and cls.with_compat_known else None,
        "advisory": bool((cls is not None and cls.advisory) or record.advisory),
        "kind": kind,
        "kind_label": CLASS_LABELS.get(kind, ""),
        "note": note,
        "older_harness": note.startswith(OLDER_HARNESS),  # labelled (causes.ISOLATED_SINCE)
        "error": to_json(record.error) or None,
        "reason": record.reason,
        "seconds": record.seconds if held(record, "seconds") else None,
        "entry": _entry_view(cls.breakage if cls is not None else None),
        "behind": _behind_view(cls.behind if cls is not None else None),
        "adapter_regression": regression,
        "figures": figure_tables(_detail_and_shapes(record)),
    }


def _detail_and_shapes(probe: ProbeRecord) -> Any:
    """The probe's detail with what its run's engine showed of the shapes (schema 4 keeps them apart, in `shapes`)."""
    detail = probe.detail if held(probe, "detail") else None
    return {**detail, **to_json(probe.shapes)} if detail is not None and probe.shapes is not None else detail


def _behind_view(behind: ProbeClass | None) -> dict[str, Any] | None:
    if behind is None:
        return None
    return {"kind": behind.kind, "label": CLASS_LABELS.get(behind.kind, "") or behind.kind,
            "note": behind.note, "entry": _entry_view(behind.breakage)}


def _tail(p: dict[str, Any]) -> tuple[Any, ...]:
    """What the Markdown says of a listed probe after its key: probes that would read the same share a line."""
    entry, behind = p["entry"], p["behind"]
    behind_entry = behind["entry"] if behind else None
    return (p["kind"], p["advisory"], repr(p["error"]), p["status"], p["reason"], entry["id"] if entry else None,
            p["note"], p["with_compat"], p["with_compat_entry"], p["adapter_regression"],
            repr(behind["kind"] if behind else None), behind["note"] if behind else None,
            behind_entry["id"] if behind_entry else None)


def listed_groups(probes: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The listed probes in order, neighbours that read the same (one start-up failure behind six probes) as
    one group: the job-summary Markdown names each key once and says the rest once (issue 45: ≤ 1 MiB)."""
    groups: list[list[dict[str, Any]]] = []
    for p in (p for p in probes if p["listed"]):
        if groups and not p["new_findings"] and not groups[-1][0]["new_findings"] and _tail(groups[-1][0]) == _tail(p):
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


def reason_groups(reasons: list[str]) -> list[str]:
    """A cell's reasons, those that differ only in the probe they name joined: `a error, b error: could not set
    up: …` (the same words after the first `: `)."""
    heads: dict[str, list[str]] = {}
    for reason in reasons:
        head, sep, rest = str(reason).partition(": ")
        heads.setdefault(rest if sep else str(reason), []).append(head if sep else "")
    return [", ".join(h for h in heads_ if h) + (": " if any(heads_) else "") + rest for rest, heads_ in heads.items()]


def _cell_view(cell: DecidedCell) -> dict[str, Any]:
    shown = to_json(cell.record) if cell.record is not None else {}
    cid = cell_id(shown)
    probes = [_probe_view(p, cls, cid) for p, cls in cell.decision.probes]
    probes.sort(key=lambda p: 0 if p["new_findings"] else 1)  # stable: NEW first, then probe order
    verdict = cell.verdict.value
    reasons = list(cell.decision.reasons)
    tally = {k: sum(1 for p in probes if p["kind"] == k and not p["advisory"]) for k in ("known", "fixed")}
    tally["new"] = sum(p["new_findings"] for p in probes if not p["advisory"])
    tally["regressions"] = sum(1 for p in probes if p["adapter_regression"] and not p["advisory"])
    tally["error"] = sum(1 for p in probes if p["status"] == "error" and not p["advisory"])
    record = cell.record
    return {
        "cid": cid,
        "anchor": f"cell-{cid}",
        "vllm": str(record.vllm if record is not None else None),
        "speculators": str(record.speculators if record is not None else None),
        "backend": record.backend.value if record is not None else None,
        "profile": record.profile if record is not None else None,
        "verdict": verdict,
        "verdict_symbol": VERDICT_SYMBOLS.get(verdict, "?"),
        "verdict_reasons": reasons,
        "stored_verdict": str(cell.stored_verdict) if cell.stored_verdict is not None else None,
        "label": _baseline.cell_label(shown),
        "env": shown["env"] if record is not None and record.env is not None else {},
        "env_shims": shown["env_shims"] if record is not None and record.env_shims else [],
        "seconds": {k: fmt_number(v) for k, v in shown["seconds"].items()}
        if record is not None and record.seconds is not None else {},
        "steps": [{**s, "seconds": fmt_number(s["seconds"])} for s in shown["steps"]]
        if record is not None and record.steps else [],
        "install_log_tail": record.install_log_tail if record is not None else None,
        "error": record.error if record is not None else None,
        "probes": probes,
        "listed_groups": listed_groups(probes),
        "why": reason_groups(reasons),
        "tally": tally,
        "static": shown["static"] if record is not None and record.static is not None else None,
        "fidelity": shown["fidelity"] if record is not None and record.fidelity is not None else None,
        "server_era": server_era_view(cell),
        "run": to_json(cell.run),
        "page": "",  # the page its details are on, relative to compat.html ("": that page itself; render_pages)
    }


def _kimi_probe(probe: dict[str, Any]) -> CheckedProbe:
    """A Kimi check as the report shows it (a check that states no status reads `error`)."""
    return CheckedProbe(build(ProbeRecord, dict(probe, status=probe.get("status") or ProbeStatus.ERROR.value)))


@dataclass(frozen=True)
class Summary:
    """The report's summary (build.matrix_section): its cells per verdict, its probes per kind, the gate's exit code."""
    verdicts: dict[str, int] = field(default_factory=dict)
    probes: dict[str, int] = field(default_factory=dict)
    exit_code: Optional[int] = None


@dataclass(frozen=True)
class ReportSections:
    """The report's own sections beside its cells (build_report's, each absent where it did not run), read once."""
    summary: Summary
    kimi: Optional[dict[str, Any]]  # the Kimi suite's own words (compat.harness.kimi)
    changes: Optional[dict[str, Any]]  # baseline.diff's
    bisect: Any
    flips: list[Any]
    support: Any
    cells: list[Any]


def report_sections(report: Mapping[str, Any]) -> ReportSections:
    """The sections of a report as built or as read back from its compat.json; a summary not of the shape
    build writes reads as none."""
    def section(name: str) -> Any:
        return report[name] if name in report else None

    try:
        summary: Summary = typed(Summary, section("summary") or {})
    except RecordError:
        summary = Summary()
    kimi = section("kimi")
    return ReportSections(summary=summary, kimi=kimi if isinstance(kimi, dict) else None,
                          changes=section("changes") or None, bisect=section("bisect"), flips=section("flips") or [],
                          support=section("support"), cells=section("cells") or [])


def view_model(report: dict[str, Any]) -> dict[str, Any]:
    sections = report_sections(report)
    cells = [_cell_view(c) for c in decided_cells(report)]
    vllms = sorted({c["vllm"] for c in cells}, key=version_key)
    specs = sorted({c["speculators"] for c in cells}, key=version_key)
    grid = {v: {s: [c for c in cells if c["vllm"] == v and c["speculators"] == s] for s in specs} for v in vllms}
    machine = report["machine"]  # build_report's own (machine_info)
    backends = machine["backends"]
    where_backend = ", ".join(
        "GPU (CUDA)" if b in ("cuda", "gpu") else b.upper() if b == "cpu" else b for b in backends
    ) or "unknown backend"
    attention = [
        {"cell": c, "probe": p}
        for c in cells
        for p in c["probes"]
        if p["new_findings"] or p["kind"] == "fixed" or (p["status"] == "error" and not p["advisory"])
        or p["adapter_regression"]
    ]
    attention.sort(key=lambda a: 0 if a["probe"]["new_findings"] else 1 if a["probe"]["kind"] == "error" else 2)
    kimi = sections.kimi
    kimi_view = None
    if kimi is not None:
        kimi_view = {
            "status": kimi.get("status") or kimi.get("verdict"),
            "reason": kimi.get("reason"),
            "probes": [_probe_view(_kimi_probe(p), None, "kimi") for p in kimi.get("probes") or []
                       if isinstance(p, dict) and "id" in p],
            "figures": figure_tables(
                {k: v for k, v in kimi.items() if k not in ("status", "verdict", "reason", "probes")}
            ),
        }
    return {
        "report": report,
        "cells": cells,
        "vllms": vllms,
        "specs": specs,
        "grid": grid,
        "machine": machine,
        "where_backend": where_backend,
        "summary": sections.summary,
        "verdict_symbols": VERDICT_SYMBOLS,
        "status_symbols": STATUS_SYMBOLS,
        "attention": attention,
        "changes": sections.changes,
        "changes_empty": _baseline.is_empty(sections.changes) if sections.changes else True,
        "kimi": kimi_view,
        "bisect": sections.bisect,
        "flips": sections.flips,
        "support_table": support_table.fragments(sections.support, markdown_type=Md),
        "gate": GATE_WORDS.get(code, "unknown") if (code := sections.summary.exit_code) is not None else "unknown",
    }


# --------------------------------------------------------------------------- rendering


def _md_finalize(value: Any) -> str:
    """Every `{{ }}` of the Markdown templates: what `md` or `mdcode` did not already make safe is escaped."""
    return value if isinstance(value, Md) else md_escape(str(value), limit=None)


def _env(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=autoescape,
        finalize=None if autoescape else _md_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = fmt_number
    env.filters["md"] = md_escape
    env.filters["mdcode"] = md_code
    return env


# Both documents pass whole through compat.shared.neutral as they are rendered: every text a record or a log
# gave them (escaped by the template, by markupsafe's Markup.format, by the support table's own escape) comes
# out with its control and bidirectional characters as visible escapes, newlines and tabs kept. The templates
# hold none of those characters, so the pass changes nothing of ours (the page's script embeds no data).
def render_html(report: dict[str, Any]) -> str:
    """The HTML report's first page (render_pages: the whole report where it fits PAGE_BOUND)."""
    return render_pages(report)[FIRST_PAGE]


# The first page a reader opens (the answer, its footnotes, the matrix) holds at most this many bytes, offline
# (issue 45: the published table's one page was 11.9 MB). A report over it keeps each speculators release's cell
# details on a page of its own beside it (compat-cells/speculators-S.html), that the matrix links to.
PAGE_BOUND = 2_000_000
FIRST_PAGE = "compat.html"
CELL_PAGES = "compat-cells"


def cell_page(speculators: str) -> str:
    return f"{CELL_PAGES}/speculators-{re.sub(r'[^A-Za-z0-9._-]', '_', speculators)}.html"


def render_pages(report: dict[str, Any], bound: int = PAGE_BOUND) -> dict[str, str]:
    """{relative path: HTML}: compat.html, the whole report in one self-contained file where it fits `bound`;
    else compat.html without the cells' details (each cell of the matrix links to its page) and one page per
    speculators release with its cells' details (every probe, figures, environment), each self-contained."""
    env, view = _env(True), view_model(report)
    template = env.get_template("compat.html.j2")
    whole = neutral(template.render(**view, part=None, root=""))
    if len(whole.encode("utf-8")) <= bound:
        return {FIRST_PAGE: whole}
    for cell in view["cells"]:
        cell["page"] = cell_page(cell["speculators"])
    pages = {FIRST_PAGE: neutral(template.render(**view, part=None, root=""))}
    for spec in view["specs"]:
        pages[cell_page(spec)] = neutral(template.render(**view, part=spec, root="../"))
    return pages


def render_markdown(report: dict[str, Any]) -> str:
    return neutral(_env(False).get_template("compat.md.j2").render(**view_model(report)))


# The PR-comment form of a report (GitHub refuses a comment over 65,536 characters): the answer first, then what
# needs attention, then the cells that are not compatible, as many as fit, and a link to the rest.
COMMENT = "compat-comment.md"
COMMENT_BOUND = 60_000  # characters


def comment_link() -> str:
    """Where the rest is: the CI run (its job summary holds compat.md, its artifact the pages) where GitHub's
    variables say which, else the pages beside the comment's file."""
    server, repo, run = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if server and repo and run:
        return f"{server}/{repo}/actions/runs/{run}"
    return FIRST_PAGE


def render_comment(report: dict[str, Any], link: str | None = None, bound: int = COMMENT_BOUND) -> str:
    """The report in at most `bound` characters: the gate and the answer (a support row's or column's ranges, else
    the verdicts), then each finding that needs attention (NEW first), then each cell that is not compatible,
    and the link to the full report; what does not fit is counted, never cut mid-line."""
    view = view_model(report)
    summary: Summary = view["summary"]
    probes = summary.probes
    head = ["## vLLM × speculators: hidden-state extraction compatibility", "",
            f"gate: **{view['gate']}** · {len(view['cells'])} cell(s)"
            + (f" · {probes.get('known', 0)} known, {probes.get('new', 0)} NEW, {probes.get('fixed', 0)} fixed"
               if probes else ""), ""]
    answer = str(view["support_table"]["markdown"]).split("\n### ", 1)[0].rstrip()
    if answer:
        head += [answer, ""]
    verdicts = ", ".join(f"{VERDICT_SYMBOLS.get(v, '?')} {n} {v}" for v, n in summary.verdicts.items()
                         if n)
    head += [f"Cells: {verdicts or 'none'}", ""]
    lines = ["### Needs attention", ""] if view["attention"] else []
    for a in view["attention"]:
        cell, probe = a["cell"], a["probe"]
        error = probe["error"] or {}
        what = (f"{md_escape(error.get('type') or 'error', 80)}: {md_escape(error.get('message') or '', 200)}"
                if error else md_escape(probe["note"] or probe["status"], 200))
        label = "**NEW** " if probe["new_findings"] else "**fixed?** " if probe["kind"] == "fixed" else ""
        lines.append(f"- {label}{md_escape(cell['label'], 160)} {md_code(probe['key'])}: {what}")
    shown = [c for c in view["cells"] if c["verdict"] != "compatible"]
    if shown:
        lines += ["", "### Cells not compatible as released", ""]
    for c in shown:
        why = c["why"][0] if c["why"] else ""
        lines.append(f"- {md_escape(c['label'], 160)}: {c['verdict_symbol']} {c['verdict']}"
                     + (f" — {md_escape(why, 200)}" if why else ""))
    where = link or comment_link()
    text = "\n".join(head)
    tail = f"\n\nThe full report (every cell, probe, figure and footnote): {where}\n"
    kept = 0
    for line in lines:
        if len(text) + 1 + len(line) + len(tail) + 80 > bound:
            break
        text += "\n" + line
        kept += 1
    if kept < len(lines):
        text += f"\n\n… {len(lines) - kept} more line(s) not shown here"
    if len(text) + len(tail) > bound:  # an answer alone over the bound (never yet): cut at a line, then link
        text = text[: max(0, bound - len(tail) - 2)].rsplit("\n", 1)[0] + "\n…"
    return neutral(text + tail)


def write_reports(report: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Write compat.json, compat.html (and its cells' pages where it is over PAGE_BOUND: render_pages), compat.md
    (a GitHub job summary), compat-comment.md (a PR comment: render_comment) and junit/<cell-id>.xml under out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "compat.json", report)
    paths: dict[str, Any] = {"json": out_dir / "compat.json"}
    pages = render_pages(report)
    shutil.rmtree(out_dir / CELL_PAGES, ignore_errors=True)  # a page of an earlier, larger report is not kept
    for name, text in (*pages.items(), ("compat.md", render_markdown(report)),
                       (COMMENT, render_comment(report))):
        write_text_atomic(out_dir / name, text)
    paths.update(html=out_dir / FIRST_PAGE, md=out_dir / "compat.md", comment=out_dir / COMMENT,
                 pages=[out_dir / name for name in pages if name != FIRST_PAGE])
    paths["junit"] = write_junit(report_sections(report).cells, out_dir / "junit")
    return paths
