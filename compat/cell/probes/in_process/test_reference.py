"""hidden_states_match_reference: the cell's own speculators generator against transformers.

Cases: a batch of different lengths, the same batch again, prompts sharing a long prefix, a
batch larger than the scheduler's token budget (several steps), and TP=2. Each case runs raw
(the release as installed) and with compat adapters; when the raw generator stops at an
exception, the case also runs with only the exception-fixing adapters, to show the silent
faults behind it. float32 unless the runner's --dtype says bfloat16 (the reference stays
float32); tolerance per dtype in compat.cell.reference. Each run that compared records its
`figures` (every sequence x captured layer row), from which the harness recomputes pass/fail.
"""

import random
from contextlib import contextmanager

import pytest

from compat.cell import datagen, reference
from compat.shared.cell_spec import CellSpec
from compat.shared.observe import CONTRACT_TAG, WrongHiddenStates, speculators_call
from compat.shared.schedule_steps import StepReader, generator_rules_out, queues_of, shapes_summary

LAYER_IDS = [1, 3, 5]  # distinct; 5 is the last of the tiny model's 6 layers
SILENT_BREAKAGE = {"repeated": "prefix_caching_default", "shared_prefix": "prefix_caching_default",
                   "multi_step": "chunked_prefill_default"}


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(4, 512) for _ in range(n)]


def _inputs():
    rng = random.Random(20261130)
    batch = [_tokens(rng, n) for n in (37, 100, 9)]
    prefix = _tokens(rng, 40)
    shared = [prefix + _tokens(rng, n - 40) for n in (60, 45, 81)]
    big = [_tokens(rng, 500) for _ in range(17)]  # 8500 tokens > the generator's 8192 budget
    return {"batch": batch, "repeated": batch, "shared_prefix": shared, "multi_step": big, "tp2": batch}


INPUTS = _inputs()
CASES = ["batch", "repeated", "shared_prefix", "multi_step", "tp2"]
# block_multiple_lengths' case: k*B - 1, k*B and k*B + 1 tokens for the block size B the generator's engine uses
BLOCK_CASE = "block_multiple"
ASSUMED_BLOCK = 16  # speculators 0.3/0.4 build CacheConfig(block_size=16); used only where no engine was built


def block_size_of(instance) -> int | None:
    """The generator's engine's block size, read from what it built (its config, else its scheduler's)."""
    for path in (("vllm_config", "cache_config", "block_size"), ("scheduler", "cache_config", "block_size"),
                 ("scheduler", "block_size")):
        found = instance
        for name in path:
            found = getattr(found, name, None)
        if isinstance(found, int) and found > 0:
            return found
    return None


def block_prompts(block: int, max_len: int = 511) -> list[list[int]]:
    rng = random.Random(20261205 + block)
    return [_tokens(rng, n) for k in (1, 2) for n in (k * block - 1, k * block, k * block + 1) if n <= max_len]


@contextmanager
def scheduler_steps(instance):
    """The generator's Scheduler (in this process) read at every step while the block runs: its outputs as
    compat.shared.schedule_steps lines, what it did whatever it was asked."""
    lines: list[dict] = []
    scheduler = getattr(instance, "scheduler", None)
    original = getattr(scheduler, "schedule", None)
    if original is None:
        yield lines
        return
    reader = StepReader()

    def schedule(*args, **kwargs):
        out = original(*args, **kwargs)
        try:
            lines.append(reader.step_line(out, queues_of(scheduler)))
        except Exception as exc:  # noqa: BLE001 - reading never changes what the generator gets
            lines.append({"kind": "observer_error", "error": f"{type(exc).__name__}: {exc}"})
        return out

    had_own = "schedule" in vars(scheduler)
    scheduler.schedule = schedule
    try:
        yield lines
    finally:
        if had_own:
            scheduler.schedule = original
        else:
            del scheduler.schedule


class DatagenSession:
    """Generators per (mode, tp), built lazily; at most one running generator per TP size."""

    def __init__(self, profile, model_dir, spec: CellSpec):
        self.profile, self.model_dir, self.spec = profile, model_dir, spec
        self.generators: dict[tuple[str, int], datagen.Generator] = {}
        self.seen: set[tuple[str, int, str]] = set()
        self._reference_model = None
        self._tables: dict[str, list] = {}

    def generator(self, mode: str, tp: int) -> datagen.Generator:
        if (mode, tp) not in self.generators:
            for key in [k for k, gen in self.generators.items() if k[1] == tp and gen.live]:
                self.generators.pop(key).shutdown()
            self.generators[(mode, tp)] = datagen.build(
                self.profile, self.model_dir, mode=mode, layer_ids=LAYER_IDS, tp=tp, dtype=self.spec.dtype,
                gpu_memory_utilization=self.spec.gpu_memory_utilization, omp_bind_tp1=self.spec.omp_bind_tp1)
        return self.generators[(mode, tp)]

    def inputs(self, case: str, generator: datagen.Generator | None = None) -> list[list[int]]:
        if case != BLOCK_CASE:
            return INPUTS[case]
        return block_prompts(self.block_size(generator))

    def block_size(self, generator: datagen.Generator | None) -> int:
        found = block_size_of(generator.instance) if generator is not None else None
        return found or ASSUMED_BLOCK

    def reference(self, case: str, inputs: list[list[int]]) -> list:
        key = f"{case}:{len(inputs)}:{sum(map(len, inputs))}"
        if key not in self._tables:
            if self._reference_model is None:
                self._reference_model = reference.load_reference_model(self.model_dir)
            self._tables[key] = reference.reference_states(self._reference_model, inputs)
        return self._tables[key]

    def shutdown(self) -> None:
        for gen in self.generators.values():
            gen.shutdown()


@pytest.fixture(scope="session")
def datagen_session(in_process, model_dir, engines, cell_spec):
    engines.shutdown()  # two cores: the generators get them to themselves
    session = DatagenSession(in_process, model_dir, cell_spec)
    yield session
    session.shutdown()


def extract_and_compare(session: DatagenSession, mode: str, case: str, applied: dict) -> dict:
    """Run one case; return the comparison. Only the release's own calls (its generator) raise
    as its failure (datagen tags them); the reference and the comparison are ours: `error`.
    `applied` receives the adapters and environment shims in force, also when the run raises."""
    import time

    tp = 2 if case == "tp2" else 1
    generator = session.generator(mode, tp)
    applied["adapters"] = [a.id for a in generator.planned]
    applied["env_shims"] = generator.env_shims
    if case in ("repeated", "tp2") and (mode, tp, "batch") not in session.seen:
        generator.generate(INPUTS["batch"])  # the first call; the checked one is the call after
        session.seen.add((mode, tp, "batch"))
    inputs = session.inputs(case, generator)
    applied["block_size"] = session.block_size(generator)
    with scheduler_steps(generator.instance) as steps:
        returned = generator.generate(inputs)
    # what the generator's scheduler did with this call (chunked steps, prefix hits, block-multiple ends)
    applied["engine_steps"] = shapes_summary(steps, applied["block_size"]) if steps else None
    applied["shapes_n_a"] = generator_rules_out(getattr(generator.instance, "scheduler", None))
    if case == "batch":
        session.seen.add((mode, tp, "batch"))
    started = time.monotonic()
    result = reference.compare(returned, session.reference(case, inputs), [i + 1 for i in LAYER_IDS],
                               reference.tolerance_for(session.spec.dtype))
    result["reference_seconds"] = round(time.monotonic() - started, 3)
    result["rows_returned"] = [int(layers[0].shape[0]) if layers else 0 for layers in returned]
    result["rows_expected"] = [len(s) for s in inputs]
    result["adapters"] = [a["id"] for a in generator.adapters]
    result["env_shims"] = generator.env_shims
    return result


def _summary(result: dict) -> dict:
    keep = ("ok", *reference.SUMMARY_KEYS, "tolerance", "layer_semantics", "rows_returned",
            "rows_expected", "problems", "adapters", "env_shims", "reference_seconds")
    return {k: result[k] for k in keep if k in result}


def _figures(result: dict, case: str, dtype: str) -> dict:
    """What the harness recomputes pass/fail from: every (sequence, captured layer) row of this run."""
    return reference.figures(result, result["tolerance"], dtype, len(result["rows_expected"]) * len(LAYER_IDS),
                             layers=LAYER_IDS)


def release_failed(exc: BaseException) -> bool:
    """Raised by the release's own call (tagged by speculators_call), not by the harness."""
    return hasattr(exc, CONTRACT_TAG)


def run_case(session: DatagenSession, mode: str, case: str, probe_detail: dict) -> None:
    probe_detail["mode"] = mode
    probe_detail["layer_ids"] = LAYER_IDS
    probe_detail["dtype"] = (f"{session.spec.dtype} (pinned: the generator's dtype='auto' is bfloat16 on CPU; "
                             f"the reference is float32)")
    try:
        result = extract_and_compare(session, mode, case, probe_detail)
    except Exception as exc:
        if mode == "raw" and case != "tp2" and release_failed(exc):
            _look_behind_the_exception(session, case, probe_detail)
        raise
    probe_detail.update(_summary(result))
    probe_detail["figures"] = _figures(result, case, session.spec.dtype)
    if not result["ok"]:
        _attribute(result, case, probe_detail)
        with speculators_call():
            raise WrongHiddenStates(
                f"hidden states differ from the transformers reference ({case}): "
                + "; ".join(result["problems"][:3]))


def _look_behind_the_exception(session: DatagenSession, case: str, probe_detail: dict) -> None:
    """With the exceptions fixed (exception-fixing adapters only) but vLLM's defaults and the
    release's data handling left alone, is the data right?"""
    applied: dict = {}
    try:
        result = extract_and_compare(session, "api_only", case, applied)
    except Exception as exc:  # noqa: BLE001 - recorded as what the run showed
        status = "broken" if release_failed(exc) else "error"
        probe_detail["api_only"] = {"status": status, **applied,
                                    "error": f"{type(exc).__name__}: {exc}"[:500]}
        return
    probe_detail["api_only"] = {"status": "ok" if result["ok"] else "broken", **_summary(result),
                                # that run's own, not the record's
                                "figures": _figures(result, case, session.spec.dtype)}
    if not result["ok"]:  # named in api_only: the raw record's own error is the exception's
        _attribute(result, case, probe_detail["api_only"])


def _attribute(result: dict, case: str, probe_detail: dict) -> None:
    """Name the silent breakage: whole sequences returned in another order, else the case's."""
    if reference.is_permutation(result.get("sequence_matches")):
        probe_detail["breakage"] = "result_order"
        probe_detail["returned_order"] = [m[0] for m in result["sequence_matches"]]
    elif case in SILENT_BREAKAGE:
        probe_detail["breakage"] = SILENT_BREAKAGE[case]


@pytest.mark.probe("hidden_states_match_reference", data=True, composite=True)
@pytest.mark.parametrize("case", CASES)
def test_reference_raw(datagen_session, case, probe_detail, require_gpus):
    if case == "tp2":
        require_gpus(2)
    run_case(datagen_session, "raw", case, probe_detail)


@pytest.mark.probe("hidden_states_match_reference", data=True, composite=True)
@pytest.mark.compat_mode("with_compat")
@pytest.mark.parametrize("case", CASES)
def test_reference_with_compat(datagen_session, case, probe_detail, require_gpus):
    if case == "tp2":
        require_gpus(2)
    run_case(datagen_session, "with_compat", case, probe_detail)


def block_multiple_case(session: DatagenSession, mode: str, probe_detail: dict) -> None:
    """The batch of k*B - 1, k*B and k*B + 1 tokens (B: the engine's block size), every row against the reference;
    its block-multiple ends shown by the generator's own scheduler, else it cannot pass as having covered them."""
    run_case(session, mode, BLOCK_CASE, probe_detail)
    steps, block = probe_detail.get("engine_steps"), probe_detail.get("block_size")
    wanted = sum(1 for n in probe_detail.get("rows_expected", []) if block and n % block == 0)
    if not steps:
        raise RuntimeError("the generator's scheduler could not be read (no `scheduler.schedule` on the generator): "
                           "the block-multiple ends are not shown to have been scheduled")
    if steps["block_multiple_ends"] < wanted:
        raise RuntimeError(f"the generator's scheduler showed {steps['block_multiple_ends']} prompt(s) ending on a "
                           f"block boundary (B = {block}), {wanted} sent: not covered, so not a pass")


@pytest.mark.probe("block_multiple_lengths", data=True, composite=True, since=6)
def test_block_multiple_raw(datagen_session, probe_detail):
    block_multiple_case(datagen_session, "raw", probe_detail)


@pytest.mark.probe("block_multiple_lengths", data=True, composite=True, since=6)
@pytest.mark.compat_mode("with_compat")
def test_block_multiple_with_compat(datagen_session, probe_detail):
    block_multiple_case(datagen_session, "with_compat", probe_detail)
