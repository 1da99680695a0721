"""What a run folder under reports/ keeps in git: logs gzip'd, tensors as digests, no rendered pages (issue 45).

    python -m compat.harness.evidence_pack DIR [DIR ...]     # a run folder under reports/, as it is committed

- every `*.log` becomes `*.log.gz` (gzip, no name or time in its header: the same log gives the same bytes);
  compat.shared.results.read_evidence reads a log, a record or a document by its plain name or its `.gz`;
- every `*.safetensors` (the raw hidden states a server wrote) becomes `*.safetensors.json`: the file's size and
  sha256, its metadata, and per tensor its dtype, shape and the sha256 of its bytes (no test and no report reads
  the tensors themselves: the record holds the comparison's figures);
- every JSON file a cell left in its own folder (`results/<cell-id>/`: its probes' output, the cell spec;
  the raw material its record was made from, which the record holds) becomes `*.json.gz`; the records themselves
  (`results/<cell-id>.json`), the support and bisect documents and kimi.json stay as they are, read as they are;
- a report rendered from the folder's records (`compat.json`, `compat.html`, `compat.md`, `junit/`) is dropped
  (`python -m compat.report_cli --results DIR/results --out DIR` writes it again), and what it decided is kept
  in `verdicts.json`: each cell's verdict and gate, the verdict counts and the exit code, which
  tests/unit/test_committed_reports.py holds the records still give.

Records, kimi.json, support and bisect documents, READMEs, notes and screenshots are kept as they are.
tests/unit/test_evidence_size.py holds the bound on what reports/ and published/ keep in git.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

from compat.shared.results import gzip_bytes as gzip_bytes  # re-exported: its one home is compat.shared.results
from compat.shared.results import read_json, write_bytes_atomic, write_json_atomic

PAGES = ("compat.json", "compat.html", "compat.md")
VERDICTS = "verdicts.json"
TENSOR_DIGEST = ".json"  # hs_0.safetensors -> hs_0.safetensors.json


def pack_log(path: Path) -> Path:
    packed = path.with_name(path.name + ".gz")
    write_bytes_atomic(packed, gzip_bytes(path.read_bytes()))
    path.unlink()
    return packed


def tensor_digest(path: Path) -> dict[str, Any]:
    """A safetensors file as its size, sha256, metadata and per tensor dtype, shape and sha256."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for name, info in sorted(header.items()):
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        tensors[name] = {"dtype": info["dtype"], "shape": info["shape"], "bytes": end - start,
                         "sha256": hashlib.sha256(body[start:end]).hexdigest()}
    return {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "metadata": header.get("__metadata__") or {}, "tensors": tensors,
            "note": "the tensors themselves are not kept in git: compat.harness.evidence_pack"}


def pack_tensors(path: Path) -> Path:
    digest = path.with_name(path.name + TENSOR_DIGEST)
    write_json_atomic(digest, tensor_digest(path))
    path.unlink()
    return digest


def cell_files(root: Path) -> list[Path]:
    """The JSON files under a cell's own folder (`results/<cell-id>/...`), not a tensor digest nor a saved
    dataset's metadata."""
    found = []
    for results in sorted(p for p in root.rglob("results") if p.is_dir()):
        for folder in sorted(p for p in results.iterdir() if p.is_dir() and p.name not in ("support", "bisect")):
            found += [p for p in sorted(folder.rglob("*.json")) if not p.name.endswith(".safetensors" + TENSOR_DIGEST)
                      and not any(p.parent.glob("*.arrow"))]  # a saved dataset stays loadable as it is
    return found


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    """What a rendered report decided, per cell and in sum."""
    summary = report.get("summary") or {}
    return {"cells": {c["id"]: {"verdict": c["verdict"], "gate": c["gate"]} for c in report.get("cells") or []},
            "verdicts": summary.get("verdicts"), "exit_code": summary.get("exit_code"),
            "note": "what the report rendered from this folder's records decided when it was committed; the report "
                    "itself is written again by python -m compat.report_cli (compat.harness.evidence_pack)"}


def drop_pages(folder: Path) -> list[Path]:
    report = folder / "compat.json"
    dropped = []
    if report.is_file():
        write_json_atomic(folder / VERDICTS, verdicts(read_json(report, "report")))
    for name in PAGES:
        if (folder / name).is_file():
            (folder / name).unlink()
            dropped.append(folder / name)
    if (folder / "junit").is_dir():
        shutil.rmtree(folder / "junit")
        dropped.append(folder / "junit")
    return dropped


def pack(root: Path) -> dict[str, list[Path]]:
    """Compact every run folder under root (root included)."""
    done: dict[str, list[Path]] = {"logs": [], "tensors": [], "pages": []}
    for path in sorted(root.rglob("*.log")) + cell_files(root):
        done["logs"].append(pack_log(path))
    for path in sorted(root.rglob("*.safetensors")):
        done["tensors"].append(pack_tensors(path))
    for report in sorted({p.parent for p in root.rglob("compat.json")} | {root}):
        done["pages"] += drop_pages(report)
    return done


def main(argv: list[str]) -> int:
    if not argv or any(a.startswith("-") for a in argv):
        print(__doc__)
        return 64
    for folder in map(Path, argv):
        done = pack(folder)
        print(f"{folder}: {len(done['logs'])} logs and cell files gzip'd, {len(done['tensors'])} tensor files as "
              f"digests, {len(done['pages'])} rendered pages dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
