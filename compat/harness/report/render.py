"""Render the merged report (compat.harness.report.build): reports/compat.json, compat.html, compat.md, junit/.

    write_reports(report, Path("reports"))

The HTML is one self-contained file (inline CSS and JS, no network at view time), rendered
from templates/compat.html.j2 with autoescape on; the Markdown (templates/compat.md.j2) fits
a GitHub job summary or PR comment.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jinja2

from compat.harness import baseline as _baseline
from compat.harness.junit import cell_id, write_junit
from compat.harness.report import support_table
from compat.harness.report.build import version_key
from compat.harness.report.server_era import server_era_view
from compat.harness.verdict import GATE_WORDS
from compat.shared.breakages import get as get_breakage
from compat.shared.markdown import Md, md_code, md_escape
from compat.shared.neutral import neutral
from compat.shared.presentation import reference_url, symptom_text
from compat.shared.results import probe_key, write_json_atomic, write_text_atomic

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


def _entry_view(breakage_id: str | None) -> dict[str, Any] | None:
    entry = get_breakage(breakage_id) if breakage_id else None
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


def _probe_view(probe: dict[str, Any], cid: str) -> dict[str, Any]:
    cls = probe.get("classification") or {}
    err = probe.get("error") or None
    status = probe.get("status") or "error"
    key = probe_key(probe)
    kind = cls.get("kind") or ""
    return {
        "listed": status in ("broken", "error") or kind == "fixed" or bool(cls.get("new_findings"))
        or bool(cls.get("adapter_regression")),
        "new_findings": int(cls.get("new_findings") or 0),
        "key": key,
        "id": probe.get("id"),
        "case": probe.get("case"),
        "anchor": f"{cid}--{re.sub(r'[^A-Za-z0-9_-]', '_', key)}",
        "status": status,
        "status_symbol": STATUS_SYMBOLS.get(status, "?"),
        "with_compat": probe.get("with_compat"),
        "with_compat_symbol": STATUS_SYMBOLS.get(probe.get("with_compat") or "", ""),
        "with_compat_entry": cls.get("with_compat_breakage"),
        "advisory": bool(cls.get("advisory") or probe.get("advisory")),
        "kind": cls.get("kind") or "",
        "kind_label": CLASS_LABELS.get(cls.get("kind") or "", ""),
        "note": cls.get("note") or "",
        "error": err,
        "reason": probe.get("reason"),
        "seconds": probe.get("seconds"),
        "entry": _entry_view(cls.get("breakage")),
        "behind": _behind_view(cls.get("behind")),
        "adapter_regression": cls.get("adapter_regression") or "",
        "figures": figure_tables(probe.get("detail")),
    }


def _behind_view(behind: dict[str, Any] | None) -> dict[str, Any] | None:
    if not behind:
        return None
    return {"kind": behind.get("kind"), "label": CLASS_LABELS.get(behind.get("kind") or "", "") or behind.get("kind"),
            "note": behind.get("note") or "", "entry": _entry_view(behind.get("breakage"))}


def _cell_view(cell: dict[str, Any]) -> dict[str, Any]:
    cid = cell_id(cell)
    probes = [_probe_view(p, cid) for p in cell.get("probes") or []]
    probes.sort(key=lambda p: 0 if p["new_findings"] else 1)  # stable: NEW first, then probe order
    verdict = cell.get("verdict") or "error"
    tally = {k: sum(1 for p in probes if p["kind"] == k and not p["advisory"]) for k in ("known", "fixed")}
    tally["new"] = sum(p["new_findings"] for p in probes if not p["advisory"])
    tally["regressions"] = sum(1 for p in probes if p["adapter_regression"] and not p["advisory"])
    tally["error"] = sum(1 for p in probes if p["status"] == "error" and not p["advisory"])
    seconds = cell.get("seconds") or {}
    return {
        "cid": cid,
        "anchor": f"cell-{cid}",
        "vllm": str(cell.get("vllm")),
        "speculators": str(cell.get("speculators")),
        "backend": cell.get("backend"),
        "profile": cell.get("profile"),
        "verdict": verdict,
        "verdict_symbol": VERDICT_SYMBOLS.get(verdict, "?"),
        "verdict_reasons": cell.get("verdict_reasons") or [],
        "stored_verdict": cell.get("stored_verdict"),
        "label": _baseline.cell_label(cell),
        "env": cell.get("env") or {},
        "env_shims": cell.get("env_shims") or [],
        "seconds": {k: fmt_number(v) for k, v in seconds.items()} if isinstance(seconds, dict) else {},
        "steps": [{**s, "seconds": fmt_number(s.get("seconds"))} for s in cell.get("steps") or []
                  if isinstance(s, dict)],
        "install_log_tail": cell.get("install_log_tail"),
        "error": cell.get("error"),
        "probes": probes,
        "tally": tally,
        "static": cell.get("static"),
        "fidelity": cell.get("fidelity"),
        "server_era": server_era_view(cell),
        "run": cell.get("run"),
    }


def view_model(report: dict[str, Any]) -> dict[str, Any]:
    cells = [_cell_view(c) for c in report.get("cells") or []]
    vllms = sorted({c["vllm"] for c in cells}, key=version_key)
    specs = sorted({c["speculators"] for c in cells}, key=version_key)
    grid = {v: {s: [c for c in cells if c["vllm"] == v and c["speculators"] == s] for s in specs} for v in vllms}
    machine = report.get("machine") or {}
    backends = machine.get("backends") or []
    where_backend = ", ".join(
        "GPU (CUDA)" if b in ("cuda", "gpu") else b.upper() if b == "cpu" else b for b in backends
    ) or "unknown backend"
    summary = report.get("summary") or {}
    attention = [
        {"cell": c, "probe": p}
        for c in cells
        for p in c["probes"]
        if p["new_findings"] or p["kind"] == "fixed" or (p["status"] == "error" and not p["advisory"])
        or p["adapter_regression"]
    ]
    attention.sort(key=lambda a: 0 if a["probe"]["new_findings"] else 1 if a["probe"]["kind"] == "error" else 2)
    kimi = report.get("kimi")
    kimi_view = None
    if isinstance(kimi, dict):
        kimi_view = {
            "status": kimi.get("status") or kimi.get("verdict"),
            "reason": kimi.get("reason"),
            "probes": [_probe_view(p, "kimi") for p in kimi.get("probes") or [] if isinstance(p, dict) and "id" in p],
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
        "summary": summary,
        "verdict_symbols": VERDICT_SYMBOLS,
        "status_symbols": STATUS_SYMBOLS,
        "attention": attention,
        "changes": report.get("changes"),
        "changes_empty": _baseline.is_empty(report["changes"]) if report.get("changes") else True,
        "kimi": kimi_view,
        "bisect": report.get("bisect"),
        "flips": report.get("flips") or [],
        "support_table": support_table.fragments(report.get("support"), markdown_type=Md),
        "gate": GATE_WORDS.get(code, "unknown") if isinstance(code := summary.get("exit_code"), int) else "unknown",
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
    return neutral(_env(True).get_template("compat.html.j2").render(**view_model(report)))


def render_markdown(report: dict[str, Any]) -> str:
    return neutral(_env(False).get_template("compat.md.j2").render(**view_model(report)))


def write_reports(report: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Write compat.json, compat.html, compat.md and junit/<cell-id>.xml under out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "compat.json", report)
    paths: dict[str, Any] = {"json": out_dir / "compat.json"}
    for name, text in (("compat.html", render_html(report)), ("compat.md", render_markdown(report))):
        path = out_dir / name
        write_text_atomic(path, text)
        paths[name.split(".")[1]] = path
    paths["junit"] = write_junit(report.get("cells") or [], out_dir / "junit")
    return paths
