"""Detection power (issue 32): realistic faults applied, one at a time, to the vLLM installed in a CPU cell's
environment, and harmless edits beside them; for each, the cell is run for real and the bench records the verdict,
which probes caught it (status, classification, cause) and the reference figure that moved. Goal: every fault caught
by a data probe as NEW with cause contract, every harmless edit `compatible`.

Each edit replaces one exact passage of one vLLM source file (it must occur once: a release whose code moved says so
and is skipped, never run unedited); the file is restored afterwards, also when the run fails or is interrupted.
From the repository root, with the cell's environment built once (`python -m compat run --vllm V --speculators S`):

    python bench/detection_power.py --vllm 0.26.0 --speculators 0.9.0 --out /tmp/power [--only NAME ...] [--list]
    python bench/detection_power.py --out /tmp/power --table     # the table again from what ran

Writes OUT/<edit>/ (the cell's results and report) and OUT/power.json; prints the table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
CONNECTOR = "distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
RUNNER = "v1/worker/gpu_model_runner.py"
PROPOSER = "v1/spec_decode/extract_hidden_states.py"
EXTRACT = "return kv_cache[slot_mapping // block_size, slot_mapping % block_size][:num_tokens]"
ROWS = "kv_cache[slot_mapping // block_size, slot_mapping % block_size]"
# 0.32's cache layout puts the block offset third
EXTRACT_32 = ("return kv_cache[slot_mapping // block_size, :, slot_mapping % block_size][\n"
              "        :num_tokens\n    ]")
ROWS_32 = "kv_cache[slot_mapping // block_size, :, slot_mapping % block_size]"
INTERFACES = "model_executor/models/interfaces.py"
AUX_CAPTURE = "value = hidden_states + residual if residual is not None else hidden_states"


@dataclass(frozen=True)
class Edit:
    name: str
    harmless: bool
    what: str  # the fault as a user would meet it
    file: str  # relative to the vllm package
    old: str
    new: str
    also: tuple[tuple[str, str], ...] = ()  # the same edit where another release words the passage otherwise

    @property
    def alternatives(self) -> tuple[tuple[str, str], ...]:
        return ((self.old, self.new), *self.also)


EDITS = [
    Edit("rows_shifted", False, "every saved row is the next token's (off by one)", CONNECTOR,
         EXTRACT, f"return {ROWS}[1:num_tokens + 1]"),
    Edit("row_dropped", False, "the middle token's row is missing from the file", CONNECTOR,
         EXTRACT, f"return {ROWS}[:num_tokens][torch.arange(num_tokens) != num_tokens // 2]",
         also=((EXTRACT_32, f"return {ROWS_32}[:num_tokens][torch.arange(num_tokens) != num_tokens // 2]"),)),
    Edit("last_row_stale", False, "the last token's row repeats the one before it", CONNECTOR,
         EXTRACT, f"return (lambda x: torch.cat([x[:-1], x[-2:-1]]))({ROWS}[:num_tokens])"),
    Edit("layer_zeroed_long_prompts", False, "the second aux layer is zeros, for prompts over 180 tokens only",
         CONNECTOR, EXTRACT,
         f"return (lambda x: x.clone().index_fill_(1, torch.tensor([1]), 0) if num_tokens > 180 else x)"
         f"({ROWS}[:num_tokens])"),
    Edit("layers_reordered", False, "the aux layers saved in reverse order", CONNECTOR,
         EXTRACT, f"return {ROWS}[:num_tokens].flip(1)"),
    Edit("scaled", False, "the states scaled by 1 + 1e-3", CONNECTOR,
         EXTRACT, f"return {ROWS}[:num_tokens] * 1.001"),
    Edit("fp8_round_trip", False, "the states stored through float8_e4m3fn (a quantized cache)", CONNECTOR,
         EXTRACT, f"return {ROWS}[:num_tokens].to(torch.float8_e4m3fn).to(kv_cache.dtype)",
         also=((EXTRACT_32, f"return {ROWS_32}[:num_tokens].to(torch.float8_e4m3fn).to(kv_cache.dtype)"),)),
    Edit("id_zero_empty", False, "aux id 0 (the embeddings, asked only by users who choose their ids) saved as zeros",
         INTERFACES, AUX_CAPTURE,
         "value = hidden_states + residual if residual is not None else torch.zeros_like(hidden_states)"),
    Edit("bf16_round_trip", False, "the states stored through bfloat16 in a float32 run", CONNECTOR,
         EXTRACT, f"return {ROWS}[:num_tokens].to(torch.bfloat16).to(kv_cache.dtype)"),
    Edit("files_swapped", False, "each request's file holds the previous request's states and token ids",
         CONNECTOR, "        # Submit to thread pool for disk write.\n",
         "        _previous = getattr(self, '_fault_previous', None)\n"
         "        self._fault_previous = tensors\n"
         "        if _previous is not None:\n"
         "            tensors = _previous\n"
         "        # Submit to thread pool for disk write.\n"),
    Edit("token_ids_rolled", False, "the saved token ids rolled by one against the states", CONNECTOR,
         '"token_ids": pending.token_ids.clone(),', '"token_ids": torch.roll(pending.token_ids, 1),'),
    Edit("aux_ids_shifted", False, "the aux layer ids each one lower than asked (0 stays 0)", RUNNER,
         "            return tuple(layer_ids)\n", "            return tuple(max(i - 1, 0) for i in layer_ids)\n"),
    Edit("stack_order", False, "the aux layers stacked token-major, then viewed back (a reshape bug)", PROPOSER,
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=1)",
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=0).reshape("
         "target_hidden_states[0].shape[0], len(target_hidden_states), -1)"),
    Edit("image_embeds_scaled", False, "a vision-language model's image embeddings scaled by 1 + 1e-2 before they "
         "join the text (text prompts never meet it)", "model_executor/models/qwen2_5_vl.py",
         "        return image_embeds.split(sizes)", "        return (image_embeds * 1.01).split(sizes)"),
    Edit("weight_skipped_at_load", False, "one checkpoint tensor (layer 3's MLP down projection) skipped at load with "
         "only a warning, and counted as loaded (as 0.24.0's Qwen3-Next loader met fused expert names): the layer "
         "runs on uninitialised memory", "model_executor/models/llama.py",
         "        return loader.load_weights(weights)\n",
         "        def _fault_skipping(named):\n"
         "            for name, tensor in named:\n"
         "                if name.endswith('layers.3.mlp.down_proj.weight'):\n"
         "                    __import__('logging').getLogger(__name__).warning(\n"
         "                        'Parameter %s not found in params_dict, skip loading', name)\n"
         "                    continue\n"
         "                yield name, tensor\n"
         "        return loader.load_weights(_fault_skipping(weights)) | {'model.layers.3.mlp.down_proj.weight'}\n"),
    # Shape faults (issue 42): each meets only one shape of the workload_shapes probe's prompts; the other probes'
    # eight short prompts never meet most of them.
    Edit("block_multiple_end_stale", False, "the last row repeats the one before it, only for a prompt that ends "
         "exactly on a KV block boundary", CONNECTOR, EXTRACT_32,
         "return (lambda x: torch.cat([x[:-1], x[-2:-1]]) if num_tokens > 1 and num_tokens % block_size == 0 "
         f"else x)({ROWS_32}[:num_tokens])",
         also=((EXTRACT, "return (lambda x: torch.cat([x[:-1], x[-2:-1]]) if num_tokens > 1 and "
                         f"num_tokens % block_size == 0 else x)({ROWS}[:num_tokens])"),)),
    Edit("chunk_start_zeroed", False, "the first row of every continued prefill chunk (a step of a request with "
         "tokens already computed) saved as zeros", PROPOSER,
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=1)\n",
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=1)\n"
         "        _q = common_attn_metadata.query_start_loc_cpu.tolist()\n"
         "        _s = common_attn_metadata.seq_lens.cpu().tolist()\n"
         "        for _i in range(len(_q) - 1):\n"
         "            if _q[_i + 1] - _q[_i] > 2 and _s[_i] > _q[_i + 1] - _q[_i]:\n"
         "                stacked_hidden_states[_q[_i]] = 0\n"),
    # A decode fault (issue 42, include_output_tokens): only the output_token_rows probe's requests decode (a
    # decode step schedules two tokens per request, read in the scheduler's steps: a one-token step is a chunk's tail).
    Edit("decode_rows_zeroed", False, "the first row of every two-token step of a request with tokens "
         "already computed saved as zeros: each decode step (the sampled token and the draft's placeholder: "
         "extract_hidden_states proposes one token), and a prefill's tail chunk of two tokens", PROPOSER,
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=1)\n",
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=1)\n"
         "        _q = common_attn_metadata.query_start_loc_cpu.tolist()\n"
         "        _s = common_attn_metadata.seq_lens.cpu().tolist()\n"
         "        for _i in range(len(_q) - 1):\n"
         "            if _q[_i + 1] - _q[_i] == 2 and _s[_i] > 2:\n"
         "                stacked_hidden_states[_q[_i]] = 0\n"),
    Edit("preempted_blocks_rotated", False, "a request preempted and recomputed has its blocks read in rotated "
         "order", CONNECTOR,
         "        req_id = request.request_id\n        filename = self._request_filenames.pop(req_id, None)\n",
         "        req_id = request.request_id\n"
         "        if getattr(request, 'num_preemptions', 0) and len(block_ids) > 1:\n"
         "            block_ids = list(block_ids[1:]) + list(block_ids[:1])\n"
         "        filename = self._request_filenames.pop(req_id, None)\n"),
    Edit("prefix_hit_first_block", False, "a request that began with a prefix-cache hit has its first block read "
         "from its last", CONNECTOR, "        meta.pending_saves = list(self._pending_saves.values())\n",
         "        _hits = self.__dict__.setdefault('_fault_hits', set())\n"
         "        _hits.update(r.req_id for r in scheduler_output.scheduled_new_reqs if r.num_computed_tokens > 0)\n"
         "        for _p in self._pending_saves.values():\n"
         "            if _p.req_id in _hits and len(_p.block_ids) > 1:\n"
         "                _p.block_ids = [_p.block_ids[-1]] + list(_p.block_ids[1:])\n"
         "        meta.pending_saves = list(self._pending_saves.values())\n"),
    Edit("last_of_batch_first_block", False, "when three or more requests finish in one step, the last one's first "
         "block is read from the first one's", CONNECTOR,
         "        meta.pending_saves = list(self._pending_saves.values())\n",
         "        _saves = list(self._pending_saves.values())\n"
         "        if len(_saves) >= 3:\n"
         "            _saves[-1].block_ids = list(_saves[0].block_ids[:1]) + list(_saves[-1].block_ids[1:])\n"
         "        meta.pending_saves = _saves\n"),
    Edit("comment", True, "a comment added in the extraction", CONNECTOR,
         EXTRACT, f"# the rows of the request's slots, in token order\n    {EXTRACT}",
         also=((EXTRACT_32, f"# the rows of the request's slots, in token order\n    {EXTRACT_32}"),)),
    Edit("copied", True, "the extracted rows copied (clone) before the write", CONNECTOR,
         EXTRACT, f"return {ROWS}[:num_tokens].clone()",
         also=((EXTRACT_32, f"return {ROWS_32}[:num_tokens].clone()"),)),
    Edit("deepseek_residual_guard", True, "the DeepSeek aux capture guards a missing residual (the repair of "
         "aux_layer_id_zero_deepseek; only a DeepSeek target asked for id 0 meets it: run it with --variants "
         "deepseek_v3-every_layer_id to see the repair)", "model_executor/models/deepseek_v2.py",
         "aux_hidden_state = hidden_states + residual",
         "aux_hidden_state = hidden_states if residual is None else hidden_states + residual",
         also=(("aux_hidden_states.append(hidden_states + residual)",
                "aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)"),)),
    Edit("contiguous", True, "the stacked states made contiguous", PROPOSER,
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=1)",
         "stacked_hidden_states = torch.stack(target_hidden_states, dim=1).contiguous()"),
]


@contextmanager
def edited(target: Path, text: str) -> Iterator[None]:
    """`target` reads `text` inside the block, its own content again after it (also when the block raises). The
    edit is a new file renamed over the path, never a write into the file: uv hardlinks a venv's files to its cache,
    so a write into one would reach every venv built from that wheel (it did once: rows run beside this bench read
    the fault, 2026-12-03), while a rename only moves this one path."""
    backup = target.with_name(target.name + ".power-backup")
    staged = target.with_name(target.name + ".power-edit")
    os.link(target, backup)  # the original file itself, under a second name (no copy, no write)
    try:
        staged.write_text(text)
        os.replace(staged, target)
        yield
    finally:
        staged.unlink(missing_ok=True)
        os.replace(backup, target)


def vllm_dir(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import vllm, os; print(os.path.dirname(vllm.__file__))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def caught_by(report: Path) -> dict[str, Any]:
    doc = json.loads((report / "compat.json").read_text())
    cell = doc["cells"][0]
    failing = []
    for probe in cell["probes"]:
        if probe["status"] in ("ok", "n/a", "skipped"):
            continue
        label = probe["id"] + (f"[{probe['case']}]" if probe.get("case") else "")
        cls = probe.get("classification") or {}
        # only a contract failure reads `broken` (compat.harness.causes); an `error` carries its cause
        cause = "contract" if probe["status"] == "broken" else probe.get("cause")
        rows = (probe.get("figures") or {}).get("rows") or []
        errors = [r["max_abs_error"] for r in rows if isinstance(r.get("max_abs_error"), (int, float))]
        worst = max(errors) if errors else None
        failing.append({"probe": label, "status": probe["status"], "kind": cls.get("kind"),
                        "breakage": cls.get("breakage"), "cause": cause, "max_abs_error": worst,
                        "reason": (probe.get("reason") or "")[:160]})
    return {"verdict": cell["verdict"], "exit": doc["summary"]["exit_code"], "failing": failing}


def run_edit(edit: Edit, args: argparse.Namespace, python: Path, package: Path) -> dict[str, Any]:
    target = package / edit.file
    source = target.read_text()
    found = [(old, new) for old, new in edit.alternatives if source.count(old) == 1]
    if not found:
        return {"edit": edit.name, "skipped": f"{edit.file}: no wording of the passage occurs exactly once"}
    old, new = found[0]
    out = args.out / edit.name
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    with edited(target, source.replace(old, new)):
        command = [sys.executable, "-m", "compat", "run", "--vllm", args.vllm, "--speculators", args.speculators,
                   "--variants", args.variants, "--no-static", "--results", str(out / "results"),
                   "--reports", str(out / "report"), "--store", str(out / "store.sqlite")]
        with (out.parent / f"{edit.name}.log").open("w") as log:
            subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
    outcome = caught_by(out / "report")
    return {"edit": edit.name, "harmless": edit.harmless, "what": edit.what, "file": edit.file,
            "seconds": round(time.monotonic() - started), **outcome}


def table(rows: list[dict[str, Any]]) -> str:
    """One line per edit: its verdict, and each probe that caught it with its cases, its classification and cause
    (one word where every case agrees) and the largest reference error it measured."""
    lines = ["| edit | kind | verdict (exit) | caught by: probe [cases] classification/cause (largest error) |",
             "|---|---|---|---|"]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['edit']} | – | not run | {row['skipped']} |")
            continue
        by_probe: dict[str, list[dict[str, Any]]] = {}
        for f in row["failing"]:
            by_probe.setdefault(f["probe"].split("[")[0], []).append(f)
        parts = []
        for probe, found in by_probe.items():
            cases = [f["probe"].split("[", 1)[1].rstrip("]") for f in found if "[" in f["probe"]]
            words = sorted({f"{f['kind']}/{f['cause'] or f['status']}" for f in found})
            errors = [f["max_abs_error"] for f in found if f["max_abs_error"] is not None]
            parts.append(f"`{probe}`" + (f" [{', '.join(cases)}]" if cases else "") + f" {' '.join(words)}"
                         + (f" ({max(errors):.3g})" if errors else ""))
        kind = "harmless" if row["harmless"] else "fault"
        lines.append(f"| `{row['edit']}`: {row['what']} | {kind} | {row['verdict']} ({row['exit']}) | "
                     f"{'; '.join(parts) or 'nothing'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", default="0.26.0")
    parser.add_argument("--speculators", default="0.9.0")
    parser.add_argument("--backend", default="cpu", choices=("cpu",))
    parser.add_argument("--out", type=Path, default=Path("power"))
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--variants", default="none", help="the server-era variants the cell serves (default none)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--table", action="store_true", help="the table again from OUT, running nothing")
    args = parser.parse_args()
    if args.table:
        done = json.loads((args.out / "power.json").read_text())
        by_name = {e.name: e for e in EDITS}
        print(table([{**row, **caught_by(args.out / row["edit"] / "report")} if "skipped" not in row else row
                     for row in done if row["edit"] in by_name]))
        return 0
    edits = [e for e in EDITS if not args.only or e.name in args.only]
    if args.list or not edits:
        print("\n".join(f"{e.name}: {'harmless' if e.harmless else 'fault'}: {e.what} ({e.file})" for e in EDITS))
        return 0 if edits else 2
    python = ROOT / ".venvs" / f"vllm-{args.vllm}__speculators-{args.speculators}__{args.backend}" / "bin" / "python"
    if not python.exists():
        print(f"detection_power: {python} does not exist: build the cell's environment first "
              f"(python -m compat run --vllm {args.vllm} --speculators {args.speculators})", file=sys.stderr)
        return 2
    package = vllm_dir(python)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for edit in edits:
        rows.append(run_edit(edit, args, python, package))
        print(json.dumps(rows[-1]), flush=True)
        (args.out / "power.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
