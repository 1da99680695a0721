"""JUnit XML, one file per cell: reports/junit/<cell-id>.xml.

Each probe is a testcase (name = probe id or id[case], classname = compat.<cell-id>):
`broken` -> <failure>, `error` -> <error>, `skipped` / `n/a` / `unsupported-on-cpu` -> <skipped>
with the reason. A cell without probes (install-error, or a cell that failed before its probes)
gets one testcase "cell" carrying that error.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Iterable

from compat.shared.breakages import get as get_breakage
from compat.shared.neutral import neutral
from compat.shared.results import probe_key, write_bytes_atomic

_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: Any) -> str:
    """Every text of the XML: control and bidirectional characters as visible escapes (compat.shared.neutral;
    newlines and tabs kept), then anything else XML 1.0 cannot hold (lone surrogates) U+FFFD."""
    return _NOT_XML.sub("\ufffd", neutral(text))


def cell_id(cell: dict[str, Any]) -> str:
    """The cell's id, or one built from its versions; safe as a file name."""
    raw = cell.get("id") or "__".join(
        x for x in (f"vllm-{cell.get('vllm')}", f"speculators-{cell.get('speculators')}", cell.get("backend")) if x
    )
    return re.sub(r"[^A-Za-z0-9._+-]", "_", str(raw))


def cell_xml(cell: dict[str, Any]) -> ET.ElementTree:
    cid = cell_id(cell)
    probes = cell.get("probes") or []
    suite = ET.Element("testsuite", name=cid)
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("vllm", cell.get("vllm")),
        ("speculators", cell.get("speculators")),
        ("backend", cell.get("backend")),
        ("verdict", cell.get("verdict")),
    ):
        if value is not None:
            ET.SubElement(props, "property", name=name, value=_clean(value))
    for k, v in (cell.get("env") or {}).items():
        ET.SubElement(props, "property", name=_clean(f"env.{k}"), value=_clean(v))

    failures = errors = skipped = 0
    total_time = 0.0
    for probe in probes:
        seconds = float(probe.get("seconds") or 0.0)
        total_time += seconds
        case = ET.SubElement(
            suite, "testcase", classname=f"compat.{cid}", name=_clean(probe_key(probe)), time=f"{seconds:.3f}"
        )
        status = probe.get("status")
        err = probe.get("error") or {}
        cls = probe.get("classification") or {}
        body = _body(probe, err, cls)
        if status == "broken":
            failures += 1
            prefix = "NEW " if cls.get("new_findings") else ("known " if cls.get("kind") == "known" else "")
            el = ET.SubElement(
                case,
                "failure",
                type=_clean(err.get("type") or "broken"),
                message=_clean(f"{prefix}{err.get('type') or 'broken'}: {err.get('message') or ''}".strip())[:1000],
            )
            el.text = body
        elif status in ("error", "flaky"):
            errors += 1
            el = ET.SubElement(
                case,
                "error",
                type=_clean(err.get("type") or "error"),
                message=_clean(probe.get("reason") or err.get("message") or "could not run")[:1000],
            )
            el.text = body
        elif status in ("skipped", "n/a", "unsupported-on-cpu"):
            skipped += 1
            reason = probe.get("reason") or err.get("message") or ""
            ET.SubElement(case, "skipped", message=_clean(f"{status}: {reason}".strip().rstrip(":")))
        if probe.get("with_compat"):
            ET.SubElement(case, "system-out").text = _clean(f"with_compat: {probe.get('with_compat')}")

    if not probes:
        case = ET.SubElement(suite, "testcase", classname=f"compat.{cid}", name="cell", time="0.000")
        verdict = cell.get("verdict")
        text = "\n".join(
            x for x in (cell.get("error"), cell.get("install_log_tail")) if x
        ) or f"cell verdict {verdict} and no probe ran"
        if verdict in ("compatible", "compatible-with-compat"):
            pass
        elif verdict == "unsupported-on-cpu":
            skipped += 1
            ET.SubElement(case, "skipped", message=_clean(cell.get("error") or "unsupported-on-cpu"))
        else:
            errors += 1
            el = ET.SubElement(case, "error", type=_clean(verdict or "error"),
                               message=_clean(text.splitlines()[0])[:1000])
            el.text = _clean(text)

    suite.set("tests", str(max(len(probes), 1)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{total_time:.3f}")
    return ET.ElementTree(suite)


def _body(probe: dict[str, Any], err: dict[str, Any], cls: dict[str, Any]) -> str:
    lines = []
    if err:
        lines.append(f"{err.get('type')}: {err.get('message')}")
        if err.get("where"):
            lines.append(f"where: {err.get('where')}")
    if probe.get("reason"):
        lines.append(f"reason: {probe.get('reason')}")
    if probe.get("with_compat"):
        lines.append(f"with_compat: {probe.get('with_compat')}")
    if cls:
        breakage = f" ({cls.get('breakage')})" if cls.get("breakage") else ""
        lines.append(f"classification: {cls.get('kind')}{breakage}")
        if cls.get("note"):
            lines.append(f"note: {cls.get('note')}")
    entry = get_breakage(breakage_id) if (breakage_id := cls.get("breakage")) else None
    if entry is not None:
        lines.append(entry.explain("junit"))
    elif probe.get("fix"):
        lines.append(f"fix: {probe['fix']}")
    return _clean("\n".join(lines))


def write_junit(cells: Iterable[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Write one XML file per cell under out_dir; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for cell in cells:
        tree = cell_xml(cell)
        ET.indent(tree)
        path = out_dir / f"{cell_id(cell)}.xml"
        buffer = io.BytesIO()
        tree.write(buffer, encoding="utf-8", xml_declaration=True)
        write_bytes_atomic(path, buffer.getvalue())
        paths.append(path)
    return paths
