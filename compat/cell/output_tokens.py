"""The output tokens' rows (issue 42): vLLM's hidden-states connector also saves the generated tokens' rows when a
request's kv_transfer_params ask `include_output_tokens` (its `request_finished` reads the key from 0.24.0; vLLM's own
integration test of the path sets it; speculators never does). Sent by our own request to the `vllm serve` the
workload ran on, after the workload: greedy, `ignore_eos` and `min_tokens`, so each request generates exactly
workload.OUTPUT_TOKENS tokens, whose ids vLLM returns (`return_token_ids`). The file must hold the prompt and every
generated token but the last (which never had a forward pass), each row its reference's: the only rows here computed
by decode steps. The prompts come from compat.cell.workload.output_token_prompts (pure: the harness draws them again).
"""

from __future__ import annotations

import fcntl
import importlib.util
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from compat.cell.workload import OUTPUT_TOKENS

CASE = "output_tokens"
KEY = "include_output_tokens"
CONNECTOR_FILE = "distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"  # under vllm/
LOCK_WAIT = 120.0
REQUEST_TIMEOUT = 300.0  # one attempt each: a retried request would write another file


class IncompleteReply(RuntimeError):
    """vLLM answered an output-token request without the file or the generated ids: vLLM's side."""


def missing() -> str | None:
    """Why this vLLM cannot save output tokens' rows (an `n/a:` reason), or None where its connector reads the key.
    Read in the connector's source, without importing it."""
    found = importlib.util.find_spec("vllm")
    roots = list(found.submodule_search_locations or []) if found else []
    source = next((Path(root, CONNECTOR_FILE) for root in roots if Path(root, CONNECTOR_FILE).is_file()), None)
    if source is None:
        return f"n/a: this vLLM has no hidden-states connector (vllm/{CONNECTOR_FILE})"
    if KEY not in source.read_text(errors="replace"):
        return (f"n/a: this vLLM's hidden-states connector (vllm/{CONNECTOR_FILE}) never reads kv_transfer_params' "
                f"{KEY} (vLLM reads it from 0.24.0): it saves the prompt's rows only")
    return None


def written(path: Path) -> None:
    """Until the connector's asynchronous write of `path` is done: it holds an exclusive flock on `<path>.lock`
    while it writes (vLLM's own load_hidden_states takes a shared one); the lock file is then removed, as vLLM's
    cleanup_hidden_states does. A file named but never written is vLLM's fault (IncompleteReply)."""
    lock = Path(f"{path}.lock")
    deadline = time.monotonic() + LOCK_WAIT
    if lock.exists():
        with open(lock) as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise IncompleteReply(f"vLLM's write of {path} did not finish in {LOCK_WAIT:.0f} s (its "
                                              "lock stayed held)") from None
                    time.sleep(0.05)
        lock.unlink(missing_ok=True)
    if not path.is_file():
        raise IncompleteReply(f"vLLM named {path} in its reply but never wrote it")


def send(model: str, endpoint: str, prompts: Sequence[Sequence[int]], folder: Path) -> list[tuple[list[int], Path]]:
    """Each prompt with OUTPUT_TOKENS generated, all in flight at once; (prompt + generated[:-1], file) per prompt.
    A refused request raises the client's own error (openai.APIError), a reply without its file IncompleteReply:
    both vLLM's side."""
    import openai

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    client = openai.Client(base_url=endpoint, api_key="EMPTY", max_retries=0, timeout=REQUEST_TIMEOUT)

    def one(index: int) -> tuple[list[int], Path]:
        reply = client.completions.create(
            model=model, prompt=list(prompts[index]), max_tokens=OUTPUT_TOKENS, temperature=0.0,
            extra_body={"return_token_ids": True, "ignore_eos": True, "min_tokens": OUTPUT_TOKENS,
                        "kv_transfer_params": {KEY: True}})
        params = getattr(reply, "kv_transfer_params", None) or (reply.model_extra or {}).get("kv_transfer_params")
        path = (params or {}).get("hidden_states_path")
        generated = getattr(reply.choices[0], "token_ids", None)
        if not path or generated is None:
            lacking = [name for name, value in (("kv_transfer_params.hidden_states_path", path),
                                                ("the generated token ids (return_token_ids)", generated))
                       if value is None or value == ""]
            raise IncompleteReply(f"vLLM's reply lacks {' and '.join(lacking)}: {str(reply)[:300]}")
        if len(generated) != OUTPUT_TOKENS:
            raise IncompleteReply(f"vLLM generated {len(generated)} tokens where {OUTPUT_TOKENS} were asked "
                                  "(min_tokens, ignore_eos)")
        written(Path(path))
        target = folder / f"hs_{index}.safetensors"
        shutil.move(path, target)
        return list(prompts[index]) + [int(t) for t in generated][:-1], target

    with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
        return list(pool.map(one, range(len(prompts))))


def decode_words(wrong: dict[int, list[int]], prompt_lengths: list[int], block: int) -> list[str]:
    """Each output-token request with a wrong row, by where its wrong rows are: the prompt's (prefill) or the
    generated tokens' (decode steps), and the block the first wrong one falls in."""
    out = []
    for index, positions in sorted(wrong.items()):
        prompt = prompt_lengths[index]
        decode = [p for p in positions if p >= prompt]
        prefill = [p for p in positions if p < prompt]
        where = ("decode rows only" if decode and not prefill else "prompt rows only" if prefill and not decode
                 else "prompt and decode rows")
        out.append(f"output-token request {index} ({prompt}-token prompt): {where}: {len(prefill)} of {prompt} "
                   f"prompt rows, {len(decode)} of {OUTPUT_TOKENS - 1} generated rows wrong (first at "
                   f"position {positions[0]}, block {positions[0] // block} offset {positions[0] % block})")
    return out or ["no row of the output-token requests is wrong by its own reference: the failure is the files'"]
