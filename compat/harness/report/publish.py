"""The reports every command writes once, at its end, from the runs it was asked about.

    published = publish(Path("reports"), store, imports=[Path("results")])                 # what results/ holds
    published = publish(Path("reports"), store, [Path("results")], Selection(cells=ids))  # a run's own cells
    published = publish(Path("reports"), store, [], Selection(everything=True))           # every kept run

Imports the given results folders into the store first (a file that cannot be read or fails the
record schema is named in `problems`; the others are still kept and reported), then builds the
report from the runs the selection names: by default exactly the runs and documents (Kimi record,
bisect and support tables) the imported folders hold, never a newer run of the same cell id, nor a
newer copy of a document of the same name, that the store keeps from another folder or machine; each
cell with its earlier runs (flips between them; a support row's cells also name the same pair's runs
on the other backend). The Kimi record and the
support tables are typed and decided again from their evidence (compat.harness.documents: a Kimi
status from its checks, a support cell from its cell record in this report); a document that fails
its shape is a problem (exit 3), one its evidence contradicts is shown as the evidence reads and named
in `contradictions` (gate at least 2). Writes compat.json, compat.html, compat.md and junit/.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from compat.harness.documents import DocumentError, decide_kimi, kimi_shown, load_kimi, load_support, rederive_support
from compat.harness.report.build import build_report, decided_cells
from compat.harness.report.render import write_reports
from compat.harness.store import BISECT, KIMI, SUPPORT, Document, Imported, Run, Store, stated_time
from compat.harness.support import with_other_backends
from compat.harness.verdict import UNTESTED, worst_gate
from compat.shared.records import CellRecord

UNDATED = "undated"  # a record that states no finished_at (shown as_recorded)
NOT_RECORDED = "not recorded"  # a record that states no harness_commit


@dataclass
class Published:
    report: dict[str, Any]
    paths: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # inputs that could not be read (exit 3)
    duplicates: dict[str, str] = field(default_factory=dict)  # cell id -> why two files hold it (gate at least 2)
    contradictions: list[str] = field(default_factory=list)  # documents their evidence contradicts (gate at least 2)

    def gate(self, cell_ids: Iterable[str] | None = None) -> int:
        """The gate over the report's cells (or only the given ones: a command's own cells; one the
        report lacks tested nothing); a cell id two files hold never passes, nor does a report showing
        a document that its evidence contradicts (compat.harness.documents)."""
        gates = {c["id"]: c["gate"] for c in self.report["cells"]}
        wanted = list(gates) if cell_ids is None else list(cell_ids)
        doubled = any(i in self.duplicates for i in wanted)
        return worst_gate([gates.get(i, UNTESTED) for i in wanted]
                          + [UNTESTED] * (doubled or bool(self.contradictions)))


@dataclass(frozen=True)
class Selection:
    """Which kept runs a report shows. `everything`: every cell id's newest run and every document
    the store keeps (`nox -s report` with no folder named, `--history`). Otherwise the runs and
    documents the imported folders held, narrowed to `cells` (a command's own cell ids; one the
    folders did not hold is shown from its newest kept run) and to `documents` ((kind, name), a
    command's own tables) where given."""
    everything: bool = False
    cells: frozenset[str] | None = None
    documents: frozenset[tuple[str, str]] | None = None

    def chosen_runs(self, imported: Imported, store: Store) -> dict[str, set[str]] | None:
        if self.everything:
            return None
        if self.cells is None:
            return dict(imported.runs)
        chosen = {i: h for i, h in imported.runs.items() if i.split("@")[0] in self.cells}
        for cell_id in self.cells - set(chosen):
            kept = store.runs(cell_id)
            if kept:
                chosen[cell_id] = {kept[-1].content_hash}
        return chosen

    def chosen_documents(self, imported: Imported, kind: str) -> set[str] | None:
        if self.everything:
            return None
        wanted = imported.documents if self.documents is None else self.documents
        return {name for k, name in wanted if k == kind}

    def chosen_contents(self, imported: Imported) -> set[str] | None:
        """The documents' contents the folders held (by hash): a newer copy kept from elsewhere under a
        name they hold is not theirs."""
        return None if self.everything else set(imported.document_hashes)


def publish(out_dir: Path, store: Store, imports: Iterable[Path] = (), selection: Selection = Selection(),
            baseline: dict[str, Any] | None = None, generated_at: str | None = None,
            as_recorded: bool | None = None) -> Published:
    """`as_recorded` (the default where `generated_at` is given, as `python -m compat publish` gives it):
    the same records give the same bytes. Each run is shown with the time and harness commit its record
    states (`undated` / `not recorded` where it states none), never the store's stand-ins for them (the
    file's modification time, which a copy or a checkout sets; the commit that imported it)."""
    imported = Imported()
    for folder in imports:
        imported.merge(store.import_dir(folder))
    problems = list(imported.problems)
    history = store.history(selection.chosen_runs(imported, store))
    typed = {cell_id: [run.record for run in runs] for cell_id, runs in history.items()}  # the store's, typed
    if as_recorded if as_recorded is not None else generated_at is not None:
        history = {cell_id: [as_stated(run, record) for run, record in zip(runs, typed[cell_id])]
                   for cell_id, runs in history.items()}
    cells = [records[-1] for records in typed.values()]
    duplicates = {c.id.split("@")[0]: f"two result files hold cell {c.id.split('@')[0]}: {c.duplicate_of} "
                                      f"and another; both are reported, the second as {c.id}"
                  for c in cells if c.duplicate_of}
    contents = selection.chosen_contents(imported)
    kept = {kind: store.kept_documents(kind, selection.chosen_documents(imported, kind), contents)
            for kind in (KIMI, BISECT, SUPPORT)}
    kimi, kimi_contradictions = _kimi(list(kept[KIMI].values())[-1:], problems)
    bisect = [table.data for _name, table in sorted(kept[BISECT].items())]
    report = build_report(cells, kimi=kimi, baseline=baseline, generated_at=generated_at,
                          bisect=bisect or None, runs=history)
    support, support_contradictions = _support(sorted(kept[SUPPORT].items()), report["cells"], problems)
    if support:  # the rows and columns of `nox -s compat -- --all-vllm / --all-speculators`: the report's first section
        decided = [(c.record, c.decision.verdict) for c in decided_cells(report) if c.record is not None]
        report["support"] = [with_other_backends(table, decided) for table in support]
    return Published(report, write_reports(report, out_dir), problems, duplicates,
                     kimi_contradictions + support_contradictions)


def as_stated(run: Run, record: CellRecord) -> Run:
    """The run with the time and commit its own record (`record`, typed) states, else `undated` / `not recorded`."""
    return replace(run, ran_at=stated_time(record.finished_at) or UNDATED,
                   harness_commit=record.harness_commit or NOT_RECORDED)


def _kimi(kept: list[Document], problems: list[str]) -> tuple[dict[str, Any] | None, list[str]]:
    """The newest Kimi record, typed, its status decided from its checks (compat.harness.documents)."""
    for document in kept:
        try:
            decision = decide_kimi(load_kimi(document.data, document.source))
        except DocumentError as exc:
            problems.append(str(exc))
            return None, []
        said = [f"kimi result {document.source}: {decision.contradiction}"] if decision.contradiction else []
        return kimi_shown(document.data, decision), said
    return None, []


def _support(kept: list[tuple[str, Document]], cells: list[dict[str, Any]],
             problems: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The support tables, typed, each cell decided again from the cell records this report holds."""
    typed = []
    for _name, document in kept:
        try:
            typed.append((load_support(document.data, document.source), document.data))
        except DocumentError as exc:
            problems.append(str(exc))
    return rederive_support(typed, cells)
