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

import pytest

from compat.cell import datagen, reference
from compat.shared.cell_spec import CellSpec
from compat.shared.observe import CONTRACT_TAG, WrongHiddenStates, speculators_call

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

    def reference(self, case: str) -> list:
        if case not in self._tables:
            if self._reference_model is None:
                self._reference_model = reference.load_reference_model(self.model_dir)
            self._tables[case] = reference.reference_states(self._reference_model, INPUTS[case])
        return self._tables[case]

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
    returned = generator.generate(INPUTS[case])
    if case == "batch":
        session.seen.add((mode, tp, "batch"))
    started = time.monotonic()
    result = reference.compare(returned, session.reference(case), [i + 1 for i in LAYER_IDS],
                               reference.tolerance_for(session.spec.dtype))
    result["reference_seconds"] = round(time.monotonic() - started, 3)
    result["rows_returned"] = [int(layers[0].shape[0]) if layers else 0 for layers in returned]
    result["rows_expected"] = [len(s) for s in INPUTS[case]]
    result["adapters"] = [a["id"] for a in generator.adapters]
    result["env_shims"] = generator.env_shims
    return result


def _summary(result: dict) -> dict:
    keep = ("ok", *reference.SUMMARY_KEYS, "tolerance", "layer_semantics", "rows_returned",
            "rows_expected", "problems", "adapters", "env_shims", "reference_seconds")
    return {k: result[k] for k in keep if k in result}


def _figures(result: dict, case: str, dtype: str) -> dict:
    """What the harness recomputes pass/fail from: every (sequence, captured layer) row of this run."""
    return reference.figures(result, result["tolerance"], dtype, len(INPUTS[case]) * len(LAYER_IDS),
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
