"""What vLLM's extract_hidden_states saves for aux layer id 0 (issue 32), outside the harness.

The project's tiny Llama (compat/fixtures/tiny_llama.py, float32) in an offline `LLM` with
`speculative_config={"method": "extract_hidden_states", ...}` and `kv_transfer_config`
ExampleHiddenStatesConnector, as the server-era probes configure them (compat/cell/extraction.py's
serve_args, offline instead of `vllm serve`); the probes' fixed "batch" prompts (8, 40 and 200 tokens,
compat/cell/server_mode_runs.py); one token generated. Every saved slot is compared with every entry of
transformers' hidden_states (index 0 = embeddings, i = decoder layer i-1's output, L = after the final
norm) and with the last layer's output before the final norm (`pre_norm_L`, what id L means to vLLM).
Prints, per requested id, which reference the slot matches (smallest max abs error over the three
prompts) and the max abs error to the reference the id names (hidden_states[id], pre_norm_L for id L).

    PYTHONPATH=. python bench/layer_id_zero.py [--family llama|deepseek_v3|qwen3_moe] [--ids 0,1,3,5 | --ids all]
        [--compiled] [--in-process] [--copy-id0] [--json F]

--family picks another tiny target of the server-era variants (compat/fixtures/): DeepseekV3 (Kimi's layer
structure; its small-latent recipe, MLA off: VLLM_MLA_DISABLE=1, which leaves the decoder layers' residual and
norms as they are) or Qwen3-MoE, each in float32; `--ids all` asks 0 to the last layer at once. Run it once per id
(`--ids 3`) to see an id alone.

--copy-id0 applies the repair (compat/worker/aux_capture_copy.py) in this process and runs the engine here
(`--in-process`), so the model runs where the patch is; `--in-process` alone is its control.

On a machine without CUDA the connector is loaded through compat.worker.cpu_connector_shim (the CPU
environment shim the CPU cells use). On vLLM 0.22 - 0.23 the connector refuses chunked prefill, so it is
turned off there (the registry's connector_chunked_prefill); prefix caching stays as released.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compat.cell.server_mode_runs import PROMPTS  # noqa: E402 - the repository root first
from compat.fixtures import tiny_llama  # noqa: E402

RECORDED_ENV = ("TRITON_F32_DEFAULT", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_WORKER_MULTIPROC_METHOD",
                "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_MLA_DISABLE", "VLLM_CPU_KVCACHE_SPACE")


def _deepseek_v3(cache: Path | None) -> Path:
    from compat.fixtures import tiny_deepseek

    os.environ["VLLM_MLA_DISABLE"] = "1"  # the small-latent recipe: no MLA backend takes it on either backend
    return tiny_deepseek.ensure(cache_root=cache, recipe=tiny_deepseek.RECIPE)


def _qwen3_moe(cache: Path | None) -> Path:
    from compat.fixtures import tiny_qwen3_moe

    return tiny_qwen3_moe.ensure(cache_root=cache)


# family -> (build the tiny model, engine arguments it needs)
FAMILIES = {
    "llama": (lambda cache: tiny_llama.ensure(cache), {}),
    "deepseek_v3": (_deepseek_v3, {"trust_remote_code": True}),
    "qwen3_moe": (_qwen3_moe, {}),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", default="0,1,3,5", help="aux hidden-state layer ids, comma separated, or `all`")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="llama", help="the tiny target (float32)")
    parser.add_argument("--compiled", action="store_true",
                        help="let vLLM compile (torch.compile, CUDA graphs) instead of --enforce-eager as the probes")
    parser.add_argument("--model-cache", type=Path, default=None, help="where the tiny Llama is built")
    parser.add_argument("--storage", type=Path, default=None, help="the connector's shared_storage_path")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--in-process", action="store_true",
                        help="run the engine core and its worker in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)")
    parser.add_argument("--copy-id0", action="store_true",
                        help="apply compat/worker/aux_capture_copy.py (capture id 0 as a copy) first; implies "
                             "--in-process, so the patch reaches the process that runs the model")
    parser.add_argument("--json", type=Path, default=None, help="write the findings here too")
    return parser.parse_args(argv)


def engine_kwargs(model: str, ids: list[int], storage: Path, args: argparse.Namespace, vllm_version: str,
                  cuda: bool) -> dict:
    from packaging.version import Version

    transfer = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": str(storage)}}
    if not cuda:
        transfer["kv_connector_module_path"] = "compat.worker.cpu_connector_shim"
    kwargs = dict(model=model, dtype="float32", max_model_len=256, enforce_eager=not args.compiled,
                  speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                      "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": ids}}},
                  kv_transfer_config=transfer, **FAMILIES[args.family][1])
    if cuda:
        kwargs["gpu_memory_utilization"] = args.gpu_memory_utilization
    if Version(Version(vllm_version).base_version) < Version("0.24"):
        kwargs["enable_chunked_prefill"] = False
    return kwargs


def extract(model: str, ids: list[int], prompts: list[list[int]], storage: Path, args: argparse.Namespace,
            vllm_version: str, cuda: bool) -> tuple[list, dict]:
    """The saved hidden_states per prompt, [tokens, len(ids), hidden] each, and the engine's settings."""
    from safetensors.torch import load_file
    from vllm import LLM, SamplingParams

    kwargs = engine_kwargs(model, ids, storage, args, vllm_version, cuda)
    llm = LLM(**copy.deepcopy(kwargs))  # vLLM fills the dicts it is given (a ModelConfig in speculative_config)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(max_tokens=1, temperature=0.0))
    saved = []
    for prompt, out in zip(prompts, outputs):
        path = (out.kv_transfer_params or {}).get("hidden_states_path")
        if not path:
            raise RuntimeError(f"no hidden_states_path in the output's kv_transfer_params: {out.kv_transfer_params}")
        tensors = read_saved(path, load_file)
        states, tokens = tensors["hidden_states"], tensors["token_ids"]
        if tokens.tolist() != list(prompt):
            raise RuntimeError(f"{path}: token_ids differ from the prompt")
        saved.append(states)
    return saved, {k: v for k, v in kwargs.items() if k != "model"}


def read_saved(path: str, load_file, wait: float = 60.0):
    """The connector's file once written: it writes asynchronously, holding an exclusive flock on
    `path.lock` meanwhile (0.23+: vLLM's load_hidden_states takes a shared one); a file that does not
    read back yet is read again until `wait` runs out."""
    import fcntl

    deadline = time.monotonic() + wait
    while not Path(path).is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    while True:
        try:
            if Path(path + ".lock").exists():
                with open(path + ".lock") as lock:
                    fcntl.flock(lock, fcntl.LOCK_SH)
                    return load_file(path)
            return load_file(path)
        except Exception:  # noqa: BLE001 - half written: try again until the deadline
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def reference(model: str, prompts: list[list[int]]) -> tuple[list[dict], int]:
    """Per prompt, {name: tensor}: hs[i] for transformers' hidden_states, pre_norm_L for the last layer's
    output before the final norm (a forward hook on the last decoder layer)."""
    import torch

    from compat.cell.reference import load_reference_model

    hf = load_reference_model(model)
    layers = list(hf.model.layers)
    tables = []
    for ids in prompts:
        captured: list = []
        hook = layers[-1].register_forward_hook(
            lambda _m, _i, out, into=captured: into.append(
                (out[0] if isinstance(out, tuple) else out)[0].detach().clone()))
        try:
            with torch.no_grad():
                out = hf(torch.tensor([list(ids)]), output_hidden_states=True)
        finally:
            hook.remove()
        table = {f"hs[{i}]": h[0].detach().clone() for i, h in enumerate(out.hidden_states)}
        table[f"pre_norm_{len(layers)}"] = captured[0]
        tables.append(table)
    return tables, len(layers)


def findings(saved: list, tables: list[dict], ids: list[int], num_layers: int) -> list[dict]:
    import torch

    rows = []
    for slot, layer_id in enumerate(ids):
        named = f"pre_norm_{num_layers}" if layer_id == num_layers else f"hs[{layer_id}]"
        errors = {name: 0.0 for name in tables[0]}
        for states, table in zip(saved, tables):
            got = states[:, slot, :].to(torch.float32)
            for name, want in table.items():
                errors[name] = max(errors[name], float((got - want).abs().max()))
        best = min(errors, key=errors.get)
        rows.append({"id": layer_id, "slot": slot, "names": named, "matches": best,
                     "max_abs_error_to_match": errors[best], "max_abs_error_to_named": errors[named],
                     "scale_of_named": max(float(t[named].abs().max()) for t in tables),
                     "max_abs_error_to_each": {k: round(v, 9) for k, v in errors.items()}})
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    import importlib.metadata

    import torch

    # as the harness sets it for every cell: the offline engine's workers must not fork a process that has
    # touched CUDA (on the H200, 0.23.0's engine core failed with "Cannot re-initialize CUDA in forked subprocess")
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    if args.in_process or args.copy_id0:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    adapter = None
    if args.copy_id0:
        from compat.worker import aux_capture_copy

        adapter = {"id": aux_capture_copy.ADAPTER["id"], "applied": aux_capture_copy.apply()}
        if not adapter["applied"]:
            print(f"vLLM {importlib.metadata.version('vllm')} has no EagleModelMixin._maybe_add_hidden_state to patch: "
                  "the adapter does not apply", file=sys.stderr)
    prompts = [list(p) for p in PROMPTS["batch"]]
    model = str(FAMILIES[args.family][0](args.model_cache))
    if args.ids == "all":
        from compat.cell.server_models import num_layers as layers_of

        ids = list(range(layers_of(model) + 1))
    else:
        ids = [int(i) for i in args.ids.split(",")]
    cuda = torch.cuda.is_available()
    if not cuda:  # as the CPU cells' servers run (compat/cell/server_mode_runs.py): 1 GiB of KV cache
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    vllm_version = importlib.metadata.version("vllm")
    storage = args.storage or Path(tempfile.mkdtemp(prefix="layer-id-zero-"))
    started = time.monotonic()
    saved, settings = extract(model, ids, prompts, storage, args, vllm_version, cuda)
    tables, num_layers = reference(model, prompts)
    rows = findings(saved, tables, ids, num_layers)
    report = {
        "vllm": vllm_version, "torch": torch.__version__, "transformers": importlib.metadata.version("transformers"),
        "backend": "cuda" if cuda else "cpu", "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "family": args.family, "mode": "compiled" if args.compiled else "enforce_eager", "ids": ids, "adapter": adapter,
        "in_process": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0",
        "prompts": [len(p) for p in prompts], "num_layers": num_layers,
        "settings": settings, "seconds": round(time.monotonic() - started, 1),
        "env": {k: os.environ[k] for k in RECORDED_ENV if k in os.environ},
        "rows": rows,
    }
    print(f"vLLM {vllm_version} ({report['backend']}: {report['device']}, {report['mode']}), "
          f"torch {torch.__version__}, tiny {args.family} float32, {num_layers} layers, "
          f"prompts {report['prompts']}, ids {ids}"
          + (", in process" if report["in_process"] else "") + (f", adapter {adapter}" if adapter else ""))
    for row in rows:
        verdict = "as named" if row["matches"] == row["names"] else f"NOT {row['names']}"
        print(f"  id {row['id']}: matches {row['matches']} (max abs {row['max_abs_error_to_match']:.3g}); "
              f"{verdict}: max abs to {row['names']} {row['max_abs_error_to_named']:.3g} "
              f"(scale {row['scale_of_named']:.3g})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
