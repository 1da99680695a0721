"""The workload of the `workload_shapes` probe: prompts drawn from a seed for the engine that serves them, and what
the engine shows it did with them.

`draw(seed, engine)` builds the prompts from the block size, token budget and sequence limit the running engine
reports (compat.worker.schedule_observer's first line), never from constants: lengths at k*B - 1, k*B and k*B + 1, a
1-token prompt, prompts of three or more chunks of the token budget, a context of at least 4096 tokens, prefix-cache
hits whose shared part ends on a block boundary and mid-block, and more prompts at once than the engine runs (with a
KV cache small enough that some are preempted and recomputed). The record keeps the seed and a digest of the token
ids, so the prompts can be drawn again and checked.

`observe(lines, workload)` reads the observer's lines (the scheduler's own outputs, step by step) and says which
shapes occurred, per request and in all; `coverage` says which wanted shape did not occur, or could not (a launch
flag rules it out: n/a with why). `describe` words a failing request by its measured features.
Imports nothing from vLLM.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from compat.shared.schedule_steps import crowded_steps, prompt_digest, requests_seen

SEED = 20261205
FIRST_TOKEN = 4  # ids below are the fixture tokenizer's specials (unk, bos, eos, pad)
CONTEXT = 4096  # the long prompt reaches past this many tokens
# The served context and budget of the workload run; its KV cache holds about KV_CONTEXTS such contexts, so the
# long prompts at once need more than it has (preemption), while one still fits (vLLM refuses to start otherwise).
MAX_MODEL_LEN = 4352
MAX_NUM_BATCHED_TOKENS = 512
MAX_NUM_SEQS = 8
LONG_PREFILL_THRESHOLD = 128  # a prefill's chunk at most this: long prompts prefill side by side, each growing its KV
KV_CONTEXTS = 1.25
EXPECTED_BLOCK = {"cpu": 128, "gpu": 16}  # only to size the KV cache before the engine says its own

# phases, sent in order, each through one client run: bases first, so that the hits find their blocks cached; the
# long prompts all at once in a phase of their own, so that they prefill side by side whatever the client's order or
# the machine's load (together they need more KV cache than the engine has: preemption), then the many short ones
PHASES = ("prefix_bases", "prefix_hits", "long_together", "stress")

SHAPES = {
    "block_multiple_minus_one": "a prompt of k*B - 1 tokens (B: the engine's block size)",
    "block_multiple_end": "a prompt that ends exactly on a block boundary (k*B tokens)",
    "block_multiple_plus_one": "a prompt of k*B + 1 tokens",
    "one_token": "a 1-token prompt",
    "chunked_3": "a prompt prefilled in three or more scheduler steps (chunked prefill)",
    "context_4096": f"a prompt of at least {CONTEXT} tokens",
    "prefix_hit_boundary": "a prefix-cache hit whose shared prefix ends on a block boundary",
    "prefix_hit_mid_block": "a prefix-cache hit whose shared prefix ends mid-block",
    "waiting_beyond_max_num_seqs": "more requests in the engine at once (its waiting and running queues) than "
                                   "max_num_seqs",
    "preempted_recomputed": "a request preempted and recomputed",
}


def digest_of(prompts: Sequence[Sequence[int]]) -> str:
    return hashlib.sha256(json.dumps([list(map(int, p)) for p in prompts]).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Engine:
    """What the running engine reports (the observer's `engine` line)."""

    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    num_blocks: int | None = None

    @classmethod
    def from_line(cls, line: dict[str, Any]) -> "Engine":
        missing = [k for k in ("block_size", "max_num_batched_tokens", "max_num_seqs", "max_model_len")
                   if not line.get(k)]
        if missing:
            raise ValueError(f"the engine did not report {', '.join(missing)}: {line}")
        return cls(int(line["block_size"]), int(line["max_num_batched_tokens"]), int(line["max_num_seqs"]),
                   int(line["max_model_len"]), line.get("chunked_prefill"), line.get("prefix_caching"),
                   line.get("num_blocks"))


@dataclass(frozen=True)
class Prompt:
    name: str
    phase: str
    ids: tuple[int, ...]
    shares: int = 0  # tokens it shares with an earlier phase's prompt (a prefix-cache hit's most)


@dataclass
class Workload:
    seed: int
    engine: Engine
    vocab_size: int
    prompts: list[Prompt] = field(default_factory=list)

    def phase(self, name: str) -> list[Prompt]:
        return [p for p in self.prompts if p.phase == name]

    def record(self) -> dict[str, Any]:
        return {"seed": self.seed, "vocab_size": self.vocab_size, "engine": asdict(self.engine),
                "prompts": len(self.prompts), "digest": digest_of([p.ids for p in self.prompts]),
                "lengths": {p.name: len(p.ids) for p in self.prompts}}


def draw(seed: int, engine: Engine, vocab_size: int) -> Workload:
    """The prompts for this engine, drawn from `seed` (the same seed and engine give the same prompts)."""
    rng = random.Random(seed)
    b, budget, limit = engine.block_size, engine.max_num_batched_tokens, engine.max_model_len - 1

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(FIRST_TOKEN, vocab_size) for _ in range(n))

    out = Workload(seed, engine, vocab_size)
    base = tokens(3 * b + 7)
    out.prompts.append(Prompt("prefix_base", "prefix_bases", base))
    out.prompts += [
        Prompt("prefix_hit_boundary", "prefix_hits", base[:2 * b] + tokens(b // 2 + 3), shares=2 * b),
        Prompt("prefix_hit_mid_block", "prefix_hits", base[:2 * b + b // 2] + tokens(11), shares=2 * b + b // 2),
        Prompt("prefix_repeat_to_boundary", "prefix_hits", base[:2 * b], shares=2 * b),
    ]
    for k in (1, 2):
        for delta, label in ((-1, "minus_one"), (0, "end"), (1, "plus_one")):
            out.prompts.append(Prompt(f"block_{k}x{b}_{label}", "stress", tokens(k * b + delta)))
    out.prompts.append(Prompt("one_token", "stress", tokens(1)))
    longs = sorted({min(limit, CONTEXT + 9), min(limit, 3 * budget + 5), min(limit, 3 * CONTEXT // 4),
                    min(limit, 5 * CONTEXT // 8)}, reverse=True)
    out.prompts += [Prompt(f"long_{n}", "long_together", tokens(n)) for n in longs]
    out.prompts += [Prompt(f"short_{i}", "stress", tokens(rng.randrange(16, 2 * b)))
                    for i in range(engine.max_num_seqs + 4)]
    return out


VARIANT_CHUNK = 64  # a variant run's prefill chunk at most this (--long-prefill-token-threshold): its longest prompt
VARIANT_VOCAB = 500  # ids below the fixed prompts' wrap: no model's special or image token among them


def variant_prompts(engine: Engine, vocab_size: int, seed: int = SEED) -> list[tuple[int, ...]]:
    """A variant run's shapes case: k*B - 1, k*B and k*B + 1 tokens for the engine's block size B (as many k as its
    context holds, at most two), and one prompt of the longest length it serves, prefilled in several chunks where
    chunked prefill is on."""
    rng = random.Random(seed + engine.block_size)
    b, limit, vocab = engine.block_size, engine.max_model_len - 1, min(vocab_size, VARIANT_VOCAB)
    lengths = [n for k in (1, 2) for n in (k * b - 1, k * b, k * b + 1) if n <= limit]
    lengths.append(limit)
    return [tuple(rng.randrange(FIRST_TOKEN, vocab) for _ in range(n)) for n in dict.fromkeys(lengths)]


OUTPUT_TOKENS = 8  # tokens generated per output-token request (its rows: the prompt's and all but the last output's)


def output_token_prompts(engine: Engine, vocab_size: int, seed: int = SEED) -> list[tuple[int, ...]]:
    """The output-token requests' prompts for this engine (block size B): B - 3 tokens, so that decoding
    OUTPUT_TOKENS crosses a block boundary; a 1-token prompt, whose rows are then nearly all decode rows; and
    2B + B/2, several chunks of a small budget, whose decode starts mid-block."""
    rng = random.Random(seed + 7 * engine.block_size)
    b, limit = engine.block_size, engine.max_model_len - OUTPUT_TOKENS
    lengths = [n for n in dict.fromkeys((max(1, b - 3), 1, 2 * b + b // 2)) if n <= limit]
    return [tuple(rng.randrange(FIRST_TOKEN, min(vocab_size, VARIANT_VOCAB)) for _ in range(n)) for n in lengths]


def kv_blocks(backend: str) -> tuple[int, int]:
    """(blocks, the block size they assume): about KV_CONTEXTS contexts of MAX_MODEL_LEN tokens."""
    block = EXPECTED_BLOCK.get(backend, 16)
    return -(-int(KV_CONTEXTS * MAX_MODEL_LEN) // block), block


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def engine_of(lines: Sequence[dict[str, Any]]) -> Engine:
    found = next((line for line in lines if line.get("kind") == "engine"), None)
    if found is None:
        raise ValueError("the observer wrote no engine line: the scheduler never built the connector")
    return Engine.from_line(found)


def observe(lines: Sequence[dict[str, Any]], workload: Workload) -> dict[str, Any]:
    """Per prompt of the workload (by digest) and in all, what the scheduler's steps show."""
    b = workload.engine.block_size
    by_digest = {prompt_digest(p.ids): p for p in workload.prompts}
    reqs, totals = requests_seen(lines)
    per_prompt: dict[str, dict[str, Any]] = {}
    for req in reqs.values():
        prompt = by_digest.get(req["digest"])
        if prompt is None:
            continue
        n = len(prompt.ids)
        per_prompt[prompt.name] = {
            "length": n, "length_mod_block": n % b, "prefill_steps": req["prefill_steps"],
            "chunk_starts": req["chunk_starts"][:12], "cached_prefix": req["first_computed"] or 0,
            "shared_prefix": prompt.shares, "preempted": req["preempted"], "first_step": req["first_step"],
            "batch_position": req["batch_position"], "finished_with": req.get("finished_with", 0),
            "finished_last": int(req.get("finished_last", False))}
    happened: dict[str, list[str]] = {shape: [] for shape in SHAPES}
    for name, seen in per_prompt.items():
        n, mod = seen["length"], seen["length_mod_block"]
        if n > b and mod == b - 1:
            happened["block_multiple_minus_one"].append(name)
        if mod == 0:
            happened["block_multiple_end"].append(name)
        if n > b and mod == 1:
            happened["block_multiple_plus_one"].append(name)
        if n == 1:
            happened["one_token"].append(name)
        if seen["prefill_steps"] >= 3:
            happened["chunked_3"].append(name)
        if n >= CONTEXT:
            happened["context_4096"].append(name)
        if seen["cached_prefix"] > 0 and seen["shared_prefix"]:
            happened["prefix_hit_boundary" if seen["shared_prefix"] % b == 0 else "prefix_hit_mid_block"].append(name)
        if seen["preempted"]:
            happened["preempted_recomputed"].append(name)
    crowded = crowded_steps(lines, workload.engine.max_num_seqs)
    if crowded:
        happened["waiting_beyond_max_num_seqs"].append(f"{crowded} steps with more than "
                                                       f"{workload.engine.max_num_seqs} requests waiting or running")
    return {**totals, "requests_seen": len(per_prompt), "requests_sent": len(workload.prompts),
            "longest_prompt": max((s["length"] for s in per_prompt.values()), default=0),
            "chunked_steps": sum(max(0, s["prefill_steps"] - 1) for s in per_prompt.values()),
            "preemptions": sum(s["preempted"] for s in per_prompt.values()),
            "prefix_hits": sum(1 for s in per_prompt.values() if s["cached_prefix"] > 0),
            "block_multiple_ends": len(happened["block_multiple_end"]), "crowded_steps": crowded,
            "observer_errors": [x for x in lines if x.get("kind") == "observer_error"][:3],
            "shapes": {shape: names[:6] for shape, names in happened.items()},
            "per_prompt": per_prompt}


def ruled_out(engine: Engine) -> dict[str, str]:
    """Shapes the launch itself rules out, each with why (the probe says n/a for them, never passes them)."""
    out = {}
    if engine.chunked_prefill is False:
        off = ("the launch turns chunked prefill off (--no-enable-chunked-prefill: speculators 0.6/0.7's launch, or a "
               "flag this release needs)")
        out["chunked_3"] = f"{off}, so no prompt is prefilled in chunks"
        # unchunked, a request's whole prompt gets its blocks when it is admitted; the client asks one output token,
        # so nothing running grows afterwards, and only growth preempts
        out["preempted_recomputed"] = (f"{off}: each prompt is allocated whole when admitted and the client asks one "
                                       "output token, so no running request grows and none is preempted")
    if engine.prefix_caching is False:
        why = "the launch turns prefix caching off (--no-enable-prefix-caching), so no prompt hits the prefix cache"
        out["prefix_hit_boundary"] = out["prefix_hit_mid_block"] = why
    return out


def coverage(observed: dict[str, Any], engine: Engine) -> tuple[dict[str, str], list[str]]:
    """(n/a shape -> why, wanted shapes that did not occur)."""
    shown = {shape for shape in SHAPES if observed["shapes"].get(shape)}
    not_applicable = {shape: why for shape, why in ruled_out(engine).items() if shape not in shown}  # shown wins
    missing = [shape for shape in SHAPES if shape not in not_applicable and shape not in shown]
    return not_applicable, missing


def describe(name: str, seen: dict[str, Any] | None, block: int, bad_positions: Sequence[int]) -> str:
    """A failing prompt in its measured features: length and its place against the block size, the chunks, the
    cached prefix, preemption, its place in the batch, and where its wrong rows are."""
    if seen is None:
        return f"{name}: the scheduler never showed this prompt"
    n = seen["length"]
    k, mod = divmod(n, block)
    where = (f"{k}*B" if mod == 0 else f"{k}*B + {mod}" if mod <= block // 2 else f"{k + 1}*B - {block - mod}")
    parts = [f"{name}: length {n} = {where} (B = {block})",
             f"prefilled in {seen['prefill_steps']} step(s)" + (f" starting at {seen['chunk_starts']}"
                                                               if seen["prefill_steps"] > 1 else ""),
             f"cached prefix {seen['cached_prefix']} of shared {seen['shared_prefix']}",
             f"preempted {seen['preempted']} time(s)" if seen["preempted"] else "not preempted",
             f"batch position {seen['batch_position']} at step {seen['first_step']}",
             f"finished with {seen.get('finished_with', 0)} other(s) in its step"
             + (", the last of them" if seen.get("finished_last") and seen.get("finished_with") else "")]
    if bad_positions:
        first, last = bad_positions[0], bad_positions[-1]
        rel = [f"token {p}" + (" (last)" if p == n - 1 else "") + (f", {p % block} into its block") for p in
               (first,) + ((last,) if last != first else ())]
        parts.append(f"{len(bad_positions)} wrong row(s), {'; '.join(rel)}")
    return "; ".join(parts)


# What every failing prompt may have in common: measured features of the prompt (said with whether passing prompts
# have them too), and where its wrong rows are.
PROMPT_FEATURES: dict[str, Callable[[dict[str, Any], int], bool]] = {
    "ends on a block boundary (length % B = 0)": lambda seen, b: seen["length"] % b == 0,
    "is one token past a block multiple": lambda seen, b: seen["length"] > b and seen["length"] % b == 1,
    "is one token short of a block multiple": lambda seen, b: seen["length"] % b == b - 1,
    "was prefilled in more than one step (chunked)": lambda seen, b: seen["prefill_steps"] > 1,
    "was preempted and recomputed": lambda seen, b: seen["preempted"] > 0,
    "began with a prefix-cache hit": lambda seen, b: seen["cached_prefix"] > 0,
    "is a single token": lambda seen, b: seen["length"] == 1,
    "finished in one step with two or more others": lambda seen, b: seen.get("finished_with", 0) >= 2,
    "was the last of two or more to finish in its step": lambda seen, b: (seen.get("finished_with", 0) >= 1
                                                                          and bool(seen.get("finished_last"))),
}
ROW_FEATURES: dict[str, Callable[[dict[str, Any], int, Sequence[int]], bool]] = {
    "every row wrong": lambda seen, b, bad: len(bad) == seen["length"],
    "only its last row wrong": lambda seen, b, bad: list(bad) == [seen["length"] - 1],
    "a wrong row where a prefill chunk began": lambda seen, b, bad: bool(set(bad) & set(seen["chunk_starts"][1:])),
    "its wrong rows all in its first block": lambda seen, b, bad: bool(bad) and max(bad) < b,
    "its wrong rows all past its cached prefix": lambda seen, b, bad: bool(bad) and min(bad) >= seen["cached_prefix"],
}


def shared_features(per_prompt: dict[str, dict[str, Any]], bad: dict[str, Sequence[int]], block: int) -> list[str]:
    """What every failing prompt has in common, measured: a feature of the prompt, with how many passing prompts
    have it too (one no passing prompt has is the fault's likely key), or where its wrong rows are."""
    failing = {name: seen for name, seen in per_prompt.items() if name in bad}
    passing = [seen for name, seen in per_prompt.items() if name not in bad]
    if not failing:
        return []
    out = []
    for words, test in PROMPT_FEATURES.items():
        if all(test(seen, block) for seen in failing.values()):
            also = sum(1 for seen in passing if test(seen, block))
            out.append(f"every failing prompt {words}" + (f" (so do {also} passing)" if also
                                                          else ", and no passing prompt does"))
    whole = all(len(bad[name]) == seen["length"] for name, seen in failing.items())
    out += [f"every failing prompt has {words}" for words, test in ROW_FEATURES.items()
            if (words == "every row wrong" or not whole)  # where every row is wrong, where they are says nothing
            and all(test(seen, block, bad[name]) for name, seen in failing.items())]
    return out


# speculators' --validate-outputs refusal names the prompt only by its token count
TOKENS_NAMED = re.compile(r"num tokens (\d+)")


def request_named(message: str, workload: Workload, per_prompt: dict[str, dict[str, Any]]) -> str | None:
    """The workload prompt a client's refusal names by its length, said by its measured shape (None: none named)."""
    found = TOKENS_NAMED.search(message)
    if not found:
        return None
    names = [p.name for p in workload.prompts if len(p.ids) == int(found.group(1))]
    if not names:
        return None
    return "the request the client refused: " + " | ".join(
        describe(name, per_prompt.get(name), workload.engine.block_size, []) for name in names)
