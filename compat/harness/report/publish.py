"""The reports every command writes once, at its end, from everything the store keeps.

    published = publish(Path("reports"), store, imports=[Path("results")])

Imports the given results folders into the store first (a file that cannot be read or fails the
record schema is named in `problems`; the others are still kept and reported), then builds the
report from the newest run of every cell id, the newest Kimi record, every bisect and support table, with
each cell's runs (flips between them; a support row's cells also name the same pair's runs on the
other backend), and writes compat.json, compat.html, compat.md and junit/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from compat.harness.report.build import build_report
from compat.harness.report.render import write_reports
from compat.harness.store import BISECT, KIMI, SUPPORT, Store
from compat.harness.support import with_other_backends
from compat.harness.verdict import UNTESTED, worst_gate


@dataclass
class Published:
    report: dict[str, Any]
    paths: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # inputs that could not be read (exit 3)
    duplicates: dict[str, str] = field(default_factory=dict)  # cell id -> why two files hold it (gate at least 2)

    def gate(self, cell_ids: Iterable[str] | None = None) -> int:
        """The gate over the report's cells (or only the given ones: a command's own cells; one the
        report lacks tested nothing); a cell id two files hold never passes."""
        gates = {c["id"]: c["gate"] for c in self.report.get("cells") or []}
        wanted = list(gates) if cell_ids is None else list(cell_ids)
        doubled = any(i in self.duplicates for i in wanted)
        return worst_gate([gates.get(i, UNTESTED) for i in wanted] + [UNTESTED] * doubled)


def publish(out_dir: Path, store: Store, imports: Iterable[Path] = (), baseline: dict[str, Any] | None = None,
            generated_at: str | None = None) -> Published:
    problems: list[str] = []
    for folder in imports:
        problems += store.import_dir(folder).problems
    history = store.history()
    cells = [runs[-1].record for runs in history.values()]
    duplicates = {c["id"].split("@")[0]: f"two result files hold cell {c['id'].split('@')[0]}: {c['duplicate_of']} "
                                         f"and another; both are reported, the second as {c['id']}"
                  for c in cells if c.get("duplicate_of")}
    kimi = list(store.documents(KIMI).values())
    bisect = [table for _name, table in sorted(store.documents(BISECT).items())]
    report = build_report(cells, kimi=kimi[-1] if kimi else None, baseline=baseline, generated_at=generated_at,
                          bisect=bisect or None, runs=history)
    support = [table for _name, table in sorted(store.documents(SUPPORT).items())]
    if support:  # the rows and columns of `nox -s compat -- --all-vllm / --all-speculators`: the report's first section
        report["support"] = [with_other_backends(table, report.get("cells") or []) for table in support]
    return Published(report, write_reports(report, out_dir), problems, duplicates)
