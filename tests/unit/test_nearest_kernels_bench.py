"""bench/nearest_kernels.py's comparison can fail: a record agrees with itself, and disagrees where one side has
figures the other lacks, or one side compared a row the other did not."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

from compat.harness import published
from compat.shared.records import to_json
from compat.shared.results import load_cell

BENCH = Path(__file__).resolve().parents[2] / "bench" / "nearest_kernels.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("nearest_kernels_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_comparison_agrees_only_where_both_sides_compared_the_same():
    bench = load_bench()
    genuine = to_json(load_cell(published.RESULTS / "vllm-0.31.0__speculators-0.9.0__cpu__variants-none.json.gz"))
    assert bench.compare(copy.deepcopy(genuine), genuine)["agree"] is True
    with_figures = next(i for i, p in enumerate(genuine["probes"]) if p.get("figures"))
    one_side = copy.deepcopy(genuine)
    one_side["probes"][with_figures]["figures"] = None
    assert bench.compare(one_side, genuine)["agree"] is False
    row_missing = copy.deepcopy(genuine)
    rows = row_missing["probes"][with_figures]["figures"]["rows"]
    rows[0]["max_abs_error"] = None
    said = bench.compare(row_missing, genuine)
    assert said["agree"] is False and any("beside" in p for p in said["disagreements"])
