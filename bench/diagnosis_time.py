"""Time to full diagnosis: one cell cold (empty uv cache, no venv) and warm (venv reused), and
the default matrix warm. Also the reference checks' share of each cell's probe time.

    python bench/diagnosis_time.py [--cell CELL_ID] [--skip-cold] [--skip-matrix] [--out bench/RESULTS.md]

Runs the real harness (`python -m compat run`) in subprocesses; writes a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CELL = "vllm-0.16.0__speculators-0.3.0__cpu"


def run(args: list[str], env: dict[str, str], results: Path) -> tuple[float, list[dict]]:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "compat", "run", *args, "--results", str(results),
                    "--reports", str(results / "reports")], cwd=REPO, env=env, check=False)
    seconds = time.monotonic() - started
    cells = [json.loads(p.read_text()) for p in sorted(results.glob("vllm-*.json"))]
    return seconds, cells


def reference_share(cell: dict) -> tuple[float, float]:
    """Seconds spent in reference checks (HF forward + comparison) vs the cell's probe time."""
    spent = 0.0
    for probe in cell["probes"]:
        if probe["id"] == "hidden_states_match_reference":
            adapted = (probe["detail"].get("with_compat") or {}).get("detail") or {}
            for detail in (probe["detail"], probe["detail"].get("api_only") or {}, adapted):
                spent += detail.get("reference_seconds") or 0.0
    return spent, cell["seconds"]["probes"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", default=DEFAULT_CELL)
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--skip-matrix", action="store_true", help="time one cell only")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if not args.skip_cold:
            cold_env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
                        "COMPAT_VENV_DIR": str(tmp_path / "venvs")}
            seconds, cells = run(["--only", args.cell], cold_env, tmp_path / "cold")
            rows.append(("one cell, cold (empty uv cache, new venv)", seconds, cells))
        seconds, cells = run(["--only", args.cell], dict(os.environ), tmp_path / "warm")
        rows.append(("one cell, warm (venv reused)", seconds, cells))
        if not args.skip_matrix:
            seconds, cells = run([], dict(os.environ), tmp_path / "matrix")
            rows.append(("default matrix, warm", seconds, cells))
    lines = ["| run | wall s | install s | probes s | of which contract probes s | reference checks s (share of "
             "probes) |",
             "|---|---|---|---|---|---|"]
    for label, seconds, cells in rows:
        install = sum(c["seconds"]["install"] for c in cells)
        probes = sum(c["seconds"]["probes"] for c in cells)
        ref = sum(reference_share(c)[0] for c in cells)
        share = f"{ref:.1f} ({ref / probes:.1%})" if probes else "-"
        contract = sum(p["seconds"] for c in cells for p in c["probes"] if p["id"] != "hidden_states_match_reference")
        lines.append(f"| {label} | {seconds:.0f} | {install:.0f} | {probes:.0f} | {contract:.0f} | {share} |")
    table = "\n".join(lines)
    print(table)
    args.out.write_text(f"# Time to diagnosis (measured {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)\n\n"
                        f"{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
