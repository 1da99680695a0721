"""The workload run's client side: the drawn prompts sent phase by phase through the release's own client, checked
against the reference while the server still runs, and, where rows are wrong, the failing prompts sent again alone
to find the smallest set that still fails (the re-run check). compat.cell.workload draws and reads the shapes.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from compat.cell import extraction, workload

CASE = "workload"
CONCURRENCY = 32  # speculators 0.9.0's generate-offline-data default
SCHEDULE_LOG = "schedule.jsonl"
OBSERVER_MODULE = "compat.worker.schedule_observer"
LOG_ENV = "COMPAT_SCHEDULE_LOG"  # compat.worker.schedule_observer.LOG_ENV
SHRINK_SINGLES = 4  # at most this many failing prompts are each sent alone


def send(extraction_run: Any, endpoint: str, prompts: Sequence[Sequence[int]], folder: Path,
         concurrency: int) -> list[tuple[list[int], Path]]:
    """`prompts` through the release's client at `concurrency` requests in flight; (prompt, file) in file order."""
    shutil.rmtree(folder, ignore_errors=True)
    out = folder / "hs"
    if extraction.has_cli(extraction_run.speculators):
        extraction.write_rows(folder / "rows.jsonl", prompts)
        prepared = folder / "prepared"
        ticket = extraction.prepare_data(extraction_run.cli, extraction_run.model, folder / "rows.jsonl", prepared,
                                         folder / "prepare.log", ["--seq-length", str(workload.MAX_MODEL_LEN)])
        try:
            extraction_run.cli.wait(ticket, 300, "speculators prepare-data", folder / "prepare.log")
        except extraction.ClientFailed as exc:
            raise RuntimeError(f"could not prepare the workload: {exc}") from exc  # our side: error
        rows = extraction.read_prepared(prepared)
        extraction.generate_offline_data(extraction_run.cli, extraction_run.model, endpoint, prepared, out,
                                         folder / "client.log", concurrency, timeout=600.0)
        return [(rows[i], out / f"hs_{i}.safetensors") for i in range(len(rows))]
    # 0.5-0.7: the module client sends one prompt a call; as many calls at once as requests in flight
    rows = [list(p) for p in prompts]
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(rows)))) as pool:
        list(pool.map(lambda i: extraction.module_client(extraction_run.speculators, extraction_run.model, endpoint,
                                                         [rows[i]], out / str(i)), range(len(rows))))
    for i in range(len(rows)):
        shutil.move(out / str(i) / "hs_0.safetensors", out / f"hs_{i}.safetensors")
    return [(rows[i], out / f"hs_{i}.safetensors") for i in range(len(rows))]


def drive(extraction_run: Any, run: Any, endpoint: str, base: Path, vocab_size: int) -> None:
    """Each phase of the workload drawn for the engine this run started (its block size, budget and limits, as the
    observer wrote them); files in run.files[CASE], the workload's record in run.workload."""
    lines = workload.read_lines(base / SCHEDULE_LOG)
    try:
        engine = workload.engine_of(lines)
    except ValueError as exc:
        raise RuntimeError(f"could not read the engine's block size and limits: {exc}") from exc
    drawn = workload.draw(workload.SEED, engine, vocab_size)
    run.workload = drawn
    items: list[tuple[list[int], Path]] = []
    for phase in workload.PHASES:
        prompts = [p.ids for p in drawn.phase(phase)]
        concurrency = 1 if phase == "prefix_bases" else min(CONCURRENCY, len(prompts))
        items += send(extraction_run, endpoint, prompts, base / CASE / phase, concurrency)
        run.files[CASE] = items
    # what the scheduler did with the workload, before anything else is sent (the narrowing's own requests)
    if run.schedule_log is not None and run.schedule_log.is_file():
        kept = base / f"{CASE}-{SCHEDULE_LOG}"
        shutil.copyfile(run.schedule_log, kept)
        run.schedule_log = kept


def wrong_tokens(model: Any, items: Sequence[tuple[Sequence[int], Path]], ids: Sequence[int], tolerance: Any
                 ) -> dict[int, list[int]]:
    """Per item (index) whose rows are not the reference's: the token positions with a wrong row in any layer id
    (each token's largest error against the allowed error at its row's scale); a file that does not read back, or
    of another shape, counts every position."""
    import torch
    from safetensors.torch import load_file

    from compat.cell.reference import reference_states

    tables = reference_states(model, [list(p) for p, _ in items])
    bad: dict[int, list[int]] = {}
    for index, ((prompt, path), table) in enumerate(zip(items, tables)):
        try:
            states = load_file(str(path))["hidden_states"].to(torch.float32)
        except Exception:  # noqa: BLE001 - missing or unreadable: every row wrong
            bad[index] = list(range(len(prompt)))
            continue
        if tuple(states.shape[:2]) != (len(prompt), len(ids)):
            bad[index] = list(range(len(prompt)))
            continue
        wrong = torch.zeros(len(prompt), dtype=torch.bool)
        for j, k in enumerate(ids):
            want = table[k].to(torch.float32)
            allowed = tolerance.allowed(float(want.abs().max()))
            wrong |= ((states[:, j, :] - want).abs().amax(dim=-1) > allowed) | ~torch.isfinite(states[:, j, :]).all(-1)
        if bool(wrong.any()):
            bad[index] = [int(i) for i in torch.nonzero(wrong).flatten()]
    return bad


def shrink(extraction_run: Any, run: Any, endpoint: str, base: Path, model: Any,
           ids: Sequence[int], tolerance: Any) -> None:
    """Where the workload's rows are wrong: the failing prompts sent again, together, then each alone (at most
    SHRINK_SINGLES), while the server still runs; the smallest set that still fails goes into run.shrunk."""
    items = run.files.get(CASE) or []
    failing = wrong_tokens(model, items, ids, tolerance)
    if not failing:
        return
    names = names_of(run.workload, items)
    prompts = [items[i][0] for i in sorted(failing)]
    tried: list[dict[str, Any]] = []
    together = send(extraction_run, endpoint, prompts, base / "shrink" / "together", len(prompts))
    still = wrong_tokens(model, together, ids, tolerance)
    tried.append({"sent": [names.get(i, str(i)) for i in sorted(failing)], "together": True,
                  "still_failing": [names.get(sorted(failing)[j], str(j)) for j in sorted(still)]})
    smallest = [sorted(failing)[j] for j in sorted(still)]
    single = None
    for n, index in enumerate(list(smallest)[:SHRINK_SINGLES]):
        alone = send(extraction_run, endpoint, [items[index][0]], base / "shrink" / f"alone-{n}", 1)
        fails = bool(wrong_tokens(model, alone, ids, tolerance))
        tried.append({"sent": [names.get(index, str(index))], "together": False, "still_failing":
                      [names.get(index, str(index))] if fails else []})
        if fails:
            single = index
            break
    if single is not None:
        smallest = [single]
    run.shrunk = {"failing": [names.get(i, str(i)) for i in sorted(failing)],
                  "smallest": [names.get(i, str(i)) for i in smallest],
                  "smallest_digest": workload.digest_of([items[i][0] for i in smallest]) if smallest else None,
                  "reproduced_alone": single is not None, "tried": tried,
                  "bad_tokens": {names.get(i, str(i)): positions[:8] for i, positions in failing.items()}}


def names_of(drawn: workload.Workload | None, items: Sequence[tuple[Sequence[int], Path]]) -> dict[int, str]:
    """Item index -> the drawn prompt's name (prepare-data may reorder rows: matched by digest)."""
    if drawn is None:
        return {}
    by_digest = {workload.prompt_digest(p.ids): p.name for p in drawn.prompts}
    return {i: by_digest.get(workload.prompt_digest(prompt), f"row {i}") for i, (prompt, _) in enumerate(items)}


def vocab_size(model: str) -> int:
    config = json.loads(Path(model, "config.json").read_text())
    return int(config.get("text_config", config)["vocab_size"])
