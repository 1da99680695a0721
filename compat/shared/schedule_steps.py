"""A vLLM scheduler's own outputs, step by step, as plain lines; and what those lines show each request went through.

Both sides read a scheduler the same way: the workload run's connector observer inside `vllm serve`
(compat.worker.schedule_observer) and the in-process era's generator, whose Scheduler runs in the cell's own process
(compat.cell.probes.in_process). Reading is by attribute, so any release's SchedulerOutput serves; nothing here
imports vLLM. A line is a dict: `engine` (block size and limits), `step` (every request scheduled, with its prompt
length and digest, the tokens computed before the step and scheduled in it, whether vLLM says it resumed from
preemption; the queue lengths), `finished` (a request's preemption count, where the release keeps one).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence


def prompt_digest(token_ids: Iterable[int]) -> str:
    """What names a prompt in the lines (the scheduler sees token ids, not our names)."""
    return hashlib.sha256(",".join(str(int(t)) for t in token_ids).encode()).hexdigest()[:16]


def engine_line(vllm_config: Any, block_size: int | None = None) -> dict[str, Any]:
    scheduler = getattr(vllm_config, "scheduler_config", None)
    cache = getattr(vllm_config, "cache_config", None)
    return {"kind": "engine", "block_size": block_size or getattr(cache, "block_size", None),
            "cache_block_size": getattr(cache, "block_size", None),
            "num_blocks": getattr(cache, "num_gpu_blocks", None) or getattr(cache, "num_gpu_blocks_override", None),
            "max_num_batched_tokens": getattr(scheduler, "max_num_batched_tokens", None),
            "max_num_seqs": getattr(scheduler, "max_num_seqs", None),
            "max_model_len": getattr(getattr(vllm_config, "model_config", None), "max_model_len", None),
            "chunked_prefill": getattr(scheduler, "enable_chunked_prefill", None),
            "prefix_caching": getattr(cache, "enable_prefix_caching", None)}


def generator_rules_out(scheduler: Any) -> dict[str, str]:
    """What an in-process generator's own engine turns off, read from its Scheduler's configs, each with why: the
    shapes its calls cannot show there (n/a, never passed). speculators 0.3/0.4 build SchedulerConfig without
    enable_chunked_prefill, so multi_step's request beyond the token budget waits for the next step whole."""
    config, cache = getattr(scheduler, "scheduler_config", None), getattr(scheduler, "cache_config", None)
    chunked = getattr(config, "chunked_prefill_enabled", getattr(config, "enable_chunked_prefill", "unknown"))
    caching = getattr(cache, "enable_prefix_caching", "unknown")
    out = {}
    if chunked != "unknown" and not chunked:
        budget = getattr(config, "max_num_batched_tokens", "?")
        out["chunked_prefill"] = (f"the generator's SchedulerConfig leaves chunked prefill off (max_num_batched_tokens "
                                  f"{budget}): a prompt beyond the budget waits for the next step, it is not prefilled "
                                  "in chunks")
    if caching != "unknown" and not caching:
        out["prefix_hits"] = "the generator's CacheConfig leaves prefix caching off: no prompt hits the prefix cache"
    return out


def queues_of(scheduler: Any) -> dict[str, int]:
    try:
        return {"waiting": len(scheduler.waiting), "running": len(scheduler.running)}
    except (AttributeError, TypeError):
        return {}


@dataclass
class StepReader:
    """Turns SchedulerOutputs into `step` lines; remembers each request's prompt from its first step (later steps
    name only its id)."""

    prompts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def step_line(self, out: Any, queues: dict[str, int] | None = None) -> dict[str, Any]:
        scheduled = dict(getattr(out, "num_scheduled_tokens", {}) or {})
        requests = []
        for new in getattr(out, "scheduled_new_reqs", []) or []:
            known = self.prompts.get(new.req_id)
            if known is None:
                prompt = list(getattr(new, "prompt_token_ids", None) or [])
                known = self.prompts[new.req_id] = {"prompt_len": len(prompt), "digest": prompt_digest(prompt)}
            requests.append({"req": new.req_id, "new": True, **known, "computed": int(new.num_computed_tokens),
                             "scheduled": int(scheduled.get(new.req_id, 0))})
        cached = getattr(out, "scheduled_cached_reqs", None)
        ids = list(getattr(cached, "req_ids", []) or [])
        computed = list(getattr(cached, "num_computed_tokens", []) or [])
        resumed_ids = set(getattr(cached, "resumed_req_ids", None) or ())
        resumed_flags = list(getattr(cached, "resumed_from_preemption", None) or [])
        for i, req in enumerate(ids):
            known = self.prompts.get(req, {"prompt_len": None, "digest": None})
            requests.append({"req": req, "new": False, **known,
                             "computed": int(computed[i]) if i < len(computed) else None,
                             "scheduled": int(scheduled.get(req, 0)),
                             "resumed": req in resumed_ids or (i < len(resumed_flags) and bool(resumed_flags[i]))})
        preempted = getattr(out, "preempted_req_ids", None)
        return {"kind": "step", "requests": requests, "batch": len(scheduled),
                "tokens": int(getattr(out, "total_num_scheduled_tokens", 0) or 0),
                "preempted": sorted(map(str, preempted)) if preempted else [], **(queues or {})}


def finished_line(request: Any) -> dict[str, Any]:
    return {"kind": "finished", "req": str(request.request_id),
            "num_preemptions": getattr(request, "num_preemptions", None)}


def requests_seen(lines: Sequence[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Per request id, what its steps show (its first computed tokens: a prefix-cache hit; its prefill steps and
    where each began; how often it went back: recomputed after preemption; its first step and place in it), and the
    steps' own figures (largest batch, most waiting and running, steps with more in the engine than `crowd`)."""
    reqs: dict[str, dict[str, Any]] = {}
    totals = {"steps": 0, "largest_batch": 0, "most_waiting": 0, "most_running": 0}
    for step_no, line in enumerate(x for x in lines if x.get("kind") == "step"):
        totals["steps"] += 1
        totals["largest_batch"] = max(totals["largest_batch"], int(line.get("batch") or 0))
        totals["most_waiting"] = max(totals["most_waiting"], int(line.get("waiting") or 0))
        totals["most_running"] = max(totals["most_running"], int(line.get("running") or 0))
        preempted_now = set(line.get("preempted") or ())
        for position, item in enumerate(line.get("requests") or []):
            req = reqs.setdefault(item["req"], {"digest": item.get("digest"), "prompt_len": item.get("prompt_len"),
                                                "first_computed": None, "prefill_steps": 0, "chunk_starts": [],
                                                "upto": 0, "recomputed": 0, "resumed": 0, "preempted": 0,
                                                "first_step": step_no, "batch_position": position,
                                                "crowded_steps": 0})
            computed, scheduled = item.get("computed"), int(item.get("scheduled") or 0)
            if req["digest"] is None and item.get("digest"):
                req.update(digest=item["digest"], prompt_len=item.get("prompt_len"))
            if computed is None:
                continue
            if req["first_computed"] is None:
                req["first_computed"] = computed
            elif computed < req["upto"]:
                # its computed tokens went back below where its last step left them: its KV was dropped and is
                # computed again (once per going back, not once per chunk of the recomputation)
                req["recomputed"] += 1
            if item.get("resumed"):
                req["resumed"] += 1
            if req["prompt_len"] and computed < req["prompt_len"] and scheduled:
                req["prefill_steps"] += 1
                req["chunk_starts"].append(computed)
            req["upto"] = computed + scheduled
        for req_id in preempted_now:
            if req_id in reqs:
                reqs[req_id]["preempted"] += 1
    groups: list[list[str]] = [[]]  # the requests that finished between two steps, in the order they finished
    for line in lines:
        if line.get("kind") == "step" and groups[-1]:
            groups.append([])
        if line.get("kind") == "finished" and line.get("req") in reqs:
            groups[-1].append(line["req"])
            if line.get("num_preemptions"):
                reqs[line["req"]]["preempted"] = max(reqs[line["req"]]["preempted"], int(line["num_preemptions"]))
    for group in groups:
        for rank, req_id in enumerate(group):
            reqs[req_id].update(finished_with=len(group) - 1, finished_last=rank == len(group) - 1)
    for req in reqs.values():
        req["preempted"] = max(req["preempted"], req["resumed"], req["recomputed"])
    return reqs, totals


def crowded_steps(lines: Sequence[dict[str, Any]], limit: int) -> int:
    """Steps with more requests in the engine (its waiting and running queues) than `limit`."""
    return sum(1 for x in lines if x.get("kind") == "step" and x.get("waiting") is not None
               and x.get("running") is not None and x["waiting"] + x["running"] > limit)


def shapes_summary(lines: Sequence[dict[str, Any]], block: int) -> dict[str, int]:
    """The counts a probe records of what the scheduler did, whatever prompts it was sent."""
    reqs, totals = requests_seen(lines)
    done = [r for r in reqs.values() if r["prompt_len"]]
    return {**totals, "requests": len(done),
            "chunked_prompts": sum(1 for r in done if r["prefill_steps"] >= 2),
            "chunked_steps": sum(max(0, r["prefill_steps"] - 1) for r in done),
            "preemptions": sum(r["preempted"] for r in done),
            "prefix_hits": sum(1 for r in done if (r["first_computed"] or 0) > 0),
            "block_multiple_ends": sum(1 for r in done if r["prompt_len"] % block == 0),
            "longest_prompt": max((r["prompt_len"] for r in done), default=0)}
