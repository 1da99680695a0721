"""How far transformers' own bfloat16 forward of each tiny fixture sits from its float32 reference,
per layer index, against the bfloat16 allowance the data probes judge a served run by.

The bfloat16 budget (compat.shared.tolerances: atol 0.05 + 2% of the layer's largest magnitude) was
set from the tiny Llama. A fixture whose own bfloat16 forward already uses most of it leaves a served
bfloat16 run (other kernels, other rounding) no room: a right answer could read as NEW. This judges
transformers' bfloat16 forward as the probes judge a served run (the server prompts of
fixtures/prompts.json, 16-bit drift set aside), under the budget and under the tolerance held for the
fixture (FIXTURE_SIXTEEN_BIT); tests/unit/test_tolerances.py holds the committed record to
OWN_ERROR_COVER.

Runs inside a cell venv (torch, transformers), with the checkout on PYTHONPATH:
    PYTHONPATH=. .venvs/vllm-0.22.1__speculators-0.9.0__cpu/bin/python bench/bf16_own_error.py \
        --json bench/bf16_own_error.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys

FIXTURES = {"llama": "compat.fixtures.tiny_llama", "hybrid": "compat.fixtures.tiny_hybrid",
            "qwen3_moe": "compat.fixtures.tiny_qwen3_moe", "deepseek_v3": "compat.fixtures.tiny_deepseek",
            "qwen2_5_vl": "compat.fixtures.tiny_vlm"}


def own_error(name: str, case: str) -> dict:
    """transformers' bfloat16 forward of fixture `name` judged as the data probes judge a served run:
    compare() against the float32 tables, 16-bit drift set aside (set_aside_drift, drift_total), under
    the dtype's budget and under the tolerance held for the fixture."""
    import torch

    from compat.cell.reference import (
        _reference_states,
        compare,
        drift_rule_for,
        drift_total,
        load_reference_model,
        set_aside_drift,
    )
    from compat.fixtures.data import prompts
    from compat.shared.tolerances import tolerance_for

    model_dir = str(importlib.import_module(FIXTURES[name]).ensure())
    sequences = prompts("server")[case]
    tables = {}
    for dtype in (torch.float32, torch.bfloat16):  # the VLM as its reference loads it: text prompts only
        model = load_reference_model(model_dir, dtype)
        tables[dtype] = _reference_states(model, sequences, [{}] * len(sequences))
    want, got = tables[torch.float32], tables[torch.bfloat16]
    indexes = list(range(len(want[0])))
    rule = drift_rule_for("bfloat16")
    judged = {}
    for label, tolerance in (("budget", tolerance_for("bfloat16")), ("held", tolerance_for("bfloat16", name))):
        result = compare(got, want, expected_index=indexes, tolerance=tolerance)
        result = set_aside_drift(result, [[x.float().numpy() for x in t] for t in got],
                                 [[x.numpy() for x in t] for t in want], sequences, tolerance, rule)
        drifted, tokens, too_many = drift_total(result["rows"], rule)
        layers = []
        for index in indexes:
            rows = [r for r in result["rows"] if r["layer"] == index]
            worst = max(rows, key=lambda r: r["max_abs_error"] / tolerance.allowed(r["scale"]))
            layers.append({"index": index, "sequence": worst["sequence"], "max_abs_error": worst["max_abs_error"],
                           "scale": worst["scale"], "allowed": tolerance.allowed(worst["scale"]),
                           "used": worst["max_abs_error"] / tolerance.allowed(worst["scale"]),
                           "drifted": sum((r.get("drift") or {}).get("drifted", 0) for r in rows)})
        judged[label] = {"tolerance": list(tolerance), "passes": not result["problems"] and not too_many,
                         "problems": result["problems"][:5] + ([too_many] if too_many else []),
                         "drifted": drifted, "tokens": tokens, "most_used": max(x["used"] for x in layers),
                         "layers": layers,
                         "rows": [{"sequence": r["sequence"], "index": r["layer"], "max_abs_error": r["max_abs_error"],
                                   "scale": r["scale"], "drifted": (r.get("drift") or {}).get("drifted", 0)}
                                  for r in result["rows"]]}
    return {"fixture": name, "model_dir": model_dir, "case": case, "sequences": [len(s) for s in sequences],
            **judged}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", default=",".join(FIXTURES), help=f"comma-separated, of {', '.join(FIXTURES)}")
    parser.add_argument("--case", default="batch", help="a server case of fixtures/prompts.json")
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args(argv)
    import torch
    import transformers

    unknown = set(args.fixtures.split(",")) - set(FIXTURES)
    if unknown:
        parser.error(f"--fixtures: unknown {', '.join(sorted(unknown))}; expected some of {', '.join(FIXTURES)}")
    torch.manual_seed(0)
    results = [own_error(name, args.case) for name in args.fixtures.split(",")]
    for r in results:
        for label in ("budget", "held"):
            j = r[label]
            print(f"{r['fixture']:12s} {label:6s} {tuple(j['tolerance'])}: {'passes' if j['passes'] else 'FAILS'}, "
                  f"kept rows use up to {j['most_used']:.2f} of it, {j['drifted']}/{j['tokens']} token rows set "
                  "aside as drift  " + " ".join(f"[{x['index']}] {x['max_abs_error']:.3f}/{x['allowed']:.3f}"
                                                for x in j["layers"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"machine": platform.node(), "python": sys.version.split()[0], "torch": torch.__version__,
                       "transformers": transformers.__version__, "threads": torch.get_num_threads(),
                       "results": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
