"""`nox -s explain -- FILE` (or a log on standard input): which known breakage is this traceback?

    python -m compat.explain LOG_OR_RESULT [--vllm V] [--speculators S]
                                           [--backend cpu|gpu|cuda|rocm|npu|tpu|xpu|hpu|neuron]
                                           [--json | --format text|json|github]

Reads whatever people paste: a traceback, a `vllm serve` log (process prefixes such as
`(EngineCore pid=1) ERROR 04-21 17:49:59 [core.py:1099] `, Ray's `(pid=...)`, docker compose's
`name  | `, ISO and Kubernetes timestamps, torchrun's `[rank0]:`; vLLM V0's exception logged as its repr,
`OutOfMemoryError('CUDA out of memory. ...')`, and its worker header `Exception in worker ... while
processing method init_device: <message>, Traceback ...`), Markdown (fences, `> ` quotes, inline code),
pytest's `E   ` lines, an issue's title and prose with a one-line error in it, or a cell result file
(results/<cell>.json). It finds every exception (type, message, chained ones, the innermost vLLM file:line
where frames exist; a one-line error has no vLLM file) and the paste's setting
(compat.harness.paste_setting: the backend, from collect_env, build tags, vLLM's platform line and the
machine's words; the vLLM, torch and speculators versions, from startup and dump lines, collect_env,
`pip freeze`/`pip list` lines, pins, prose, site-packages paths, wheel names, image tags), and matches each
exception against the registry (compat.shared.breakages: an entry's `user_symptom` where it has one, else
its `symptom`, with the report's matcher). A match is *known* only when the entry applies to the versions
found (or none were found), was observed on the paste's backend (or the paste names none), and the paste is
about vLLM or speculators at all; a match outside the entry's range is shown as such, one observed only on
another backend as a candidate with that caveat, neither counted known. --vllm/--speculators/--backend
override what the paste says; the output says what was read and from where. A paste with no exception
whose words describe a silent (data) fault of the registry lists those entries as candidates only
(compat.harness.explain_prose).

Exit status: 0 when an exception found is known and every other one is known or only relays it
(EngineDeadError, "Engine core initialization failed", "Worker failed with error"); 1 when not (a
candidate is not known), or when the paste shows a crash in compiled code and no exception; 2 when the input
holds no exception (a report in words included, whatever it describes); 64 (exit_codes.USAGE) when it
cannot be read (why on standard error) or the command line is bad.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO

from compat.harness import exit_codes
from compat.harness.causes import CauseRule, cause_of
from compat.harness.explain_context import contexts
from compat.harness.explain_prose import Described, described_faults
from compat.harness.paste_setting import FLAG_BACKENDS, Setting, backend_caveat, platform_of, read_setting, scope_check  # noqa: F401
from compat.shared.breakages import REGISTRY, Breakage, Symptom
from compat.shared.neutral import neutral_terminal
from compat.shared.records import ProbeError, to_json
from compat.shared.results import MAX_INPUT_BYTES, ResultFileError, read_evidence
from compat.shared.tracebacks import (  # noqa: F401
    Found,
    behind_missing_op,
    crash_line,
    exceptions_in,
    find_exceptions,
    find_pytest_failures,
    strip_line,
)

# -- reading a paste: compat.shared.tracebacks (the parser the cell's server runs use too) ----------

_ABOUT = re.compile(r"(?<![\w])(?:vllm|speculators)(?![a-z_])", re.IGNORECASE)


def from_result(cell: dict[str, Any]) -> list[Found]:
    """The failures recorded in a cell result file, as if read from a log. `cell`: the pasted JSON, read as it
    stands (a fragment of a record explains too: it is not loaded through the record's schema)."""
    out = []
    for probe in cell.get("probes") or []:
        error = probe.get("error") or {}
        if probe.get("status") == "broken" and error.get("type"):
            out.append(Found(str(error["type"]), str(error.get("message") or ""), error.get("where"), 0,
                             [f"probe {probe['id']}" + (f"[{probe['case']}]" if probe.get("case") else "")]))
    return out


# -- the setting a paste states: compat.harness.paste_setting ----------------------------------------------

Versions = Setting  # the name issue_comment and older callers use
find_versions = read_setting


# -- matching ----------------------------------------------------------------------------------------

@dataclass
class Explanation:
    found: Found
    matches: list[Breakage]  # known: fits and applies
    closest: list[tuple[Breakage, str]]  # rejected candidates and why
    out_of_range: list[tuple[Breakage, str]] = field(default_factory=list)  # fits, but not here
    # no breakage: the environment's or our fixture's (compat.harness.causes), as the report reads it
    cause: Optional[CauseRule] = None
    root: Optional[Found] = None  # what the paste shows behind it (a compiled library vLLM could not load)
    # fits and applies to these versions, but was observed on other backends than the paste's only
    candidates: list[tuple[Breakage, str]] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return bool(self.matches)


def _symptoms(entry: Breakage, pasted: bool) -> list[Symptom]:
    """What a failure is matched against: in a paste, the entry's user symptom where it has one (it is what a
    user's log shows, and it may ask for more than the probe's symptom: a context); from a result file,
    either (the probe's own symptom holds there)."""
    candidates = (entry.user_symptom,) if pasted and entry.user_symptom else (entry.user_symptom, entry.symptom)
    return [s for s in candidates if s is not None and not s.silent and s.cases is None]


def _closeness(entry: Breakage, error: ProbeError) -> int:
    """How many of type, message and place fit (for ranking rejected candidates)."""
    best = 0
    for s in [entry.user_symptom, entry.symptom]:
        if s is None or s.silent:
            continue
        short = error.type.rsplit(".", 1)[-1]
        score = int(short in s.exception)
        score += int(bool(s.message) and bool(re.search(s.message, error.message or "")))
        score += int(bool(s.where) and bool(re.search(s.where or "", error.where or "")))
        best = max(best, score)
    return best


def explain(found: Found, vllm: str | None = None, speculators: str | None = None, backend: str | None = None,
            registry: tuple[Breakage, ...] = REGISTRY, versions: Setting | None = None,
            about_vllm: bool = True, context: str | None = None, root: Found | None = None) -> Explanation:
    """Match one exception against the registry, scoped by the versions given (or found in the paste);
    `context` is the paste's text around it (compat.harness.explain_context), for symptoms that ask for one;
    `root` what the paste shows caused it, where another exception did (the cause rules judge that one)."""
    if versions is None:
        versions = Setting(vllm=[(vllm, "--vllm")] if vllm else [],
                           speculators=[(speculators, "--speculators")] if speculators else [],
                           backend=platform_of(backend) if backend else None,
                           backend_evidence="--backend" if backend else "")
    root = None if root is found else root
    pasted = ProbeError(found.type, found.message, found.where,
                        root_cause=f"{root.type}: {root.message}" if root is not None else None)
    error = {**to_json(pasted), "context": context}  # a symptom may ask for the paste's text around it too
    matches, rejected, elsewhere, candidates = [], [], [], []
    for entry in registry:
        symptoms = _symptoms(entry, pasted=found.line > 0)
        if not symptoms:
            continue
        whys = [s.mismatch(error) for s in symptoms]
        if any(w is None for w in whys):
            not_here = scope_check(entry, versions)
            caveat = backend_caveat(entry, versions)
            if not_here:
                elsewhere.append((entry, not_here))
            elif caveat:
                candidates.append((entry, caveat))
            elif not about_vllm:
                elsewhere.append((entry, "but nothing in the paste names vLLM or speculators"))
            else:
                matches.append(entry)
        else:
            rejected.append((entry, whys[0] or ""))
    rejected.sort(key=lambda pair: -_closeness(pair[0], pasted))
    return Explanation(found, matches, [r for r in rejected if _closeness(r[0], pasted) > 0][:3], elsewhere,
                       cause=None if matches else cause_of(pasted), root=root, candidates=candidates)


# -- output ------------------------------------------------------------------------------------------

def exit_status(explanations: list[Explanation]) -> int:
    if not explanations:
        return 2
    known = [ex for ex in explanations if ex.known]
    rest = [ex for ex in explanations if not ex.known and not ex.found.wrapper and not ex.found.logged_only]
    return 0 if known and not rest else 1


def setting_line(versions: Setting) -> str:
    """What was read of the paste's setting and from where (a flag's value with what the paste said)."""
    return (f"setting read: {versions.describe()}"
            + (f" (set by {', '.join(versions.overridden)})" if versions.overridden else ""))


def render(explanations: list[Explanation], versions: Setting | None = None) -> str:
    out = []
    if versions is not None:
        out.append(setting_line(versions))
        out.append("")
    for ex in explanations:
        f = ex.found
        head = f"{f.type}: {f.message.splitlines()[0][:160] if f.message else ''}"
        place = f.where or ("no frames (a one-line error)" if f.one_line else "no vLLM frame")
        chain = f" (raised while handling the one before: {f.chained})" if f.chained else ""
        out.append(f"{head}\n  raised at {place}" + (f" (input line {f.line})" if f.line else "") + chain)
        if not f.type_shown:
            out.append("  its type is not shown (vLLM V0's worker header gives the message only, and no "
                       "traceback's last line follows it here): read as Exception")
        for entry in ex.matches:
            out.append(entry.explain("text"))
        for entry, why in ex.out_of_range:
            out.append(f"  matches {entry.id} ({entry.title}), {why}: not counted known")
        for entry, why in ex.candidates:
            out.append(f"  candidate {entry.id} ({entry.title}): its symptom fits, but it was {why}: "
                       "not counted known")
        if not ex.matches:
            if f.wrapper and all(other.found.wrapper for other in explanations):
                out.append("  relays another failure, and the paste holds none: paste the log from further up; "
                           "where it has none, the vLLM process died without raising (killed by a signal, most "
                           "often the kernel's out-of-memory killer, which `dmesg` names; or a crash in compiled code)")
            elif f.wrapper:
                out.append("  relays another failure (see the root cause above)")
            if f.logged_only:
                out.append("  vLLM logged it as a warning and went on: a failure it causes comes later (a compiled op "
                           "missing); on its own it counts neither way for the exit status")
            out.append("  no known breakage matches")
            if ex.root is not None:
                out.append(f"  behind it (input line {ex.root.line}): {ex.root.type}: "
                           f"{ex.root.message.split('; vLLM went on', 1)[0][:240]}")
            if ex.cause is not None:
                out.append(f"  not a break of the contract: {ex.cause.cause}; what to do: {ex.cause.todo}")
            for entry, why in ex.closest if ex.cause is None else ():
                out.append(f"    closest: {entry.id} ({entry.title}): rejected, {why}")
        out.append("")
    return "\n".join(out)


def render_described(faults: list[Described], versions: Setting) -> str:
    """A report in words with no exception: the registry's silent faults it describes, candidates only."""
    out = [setting_line(versions), "",
           "no exception: a report in words. The registry's silent (data) faults its words describe, as candidates "
           "only (words are no evidence which fault it is: never counted known):"]
    for d in faults:
        said = " and ".join(f"{w!r} (line {n})" for w, n in d.words)
        head = f"{d.entry.id} ({d.entry.title}): it says {said}"
        if d.why_not:
            out.append(f"  not a candidate: {head}, {d.why_not}")
            continue
        out.append(f"  candidate {head}; {d.entry.scope()}" + (f"; it was {d.caveat}" if d.caveat else ""))
        out.append(f"    fix: {d.entry.fix}")
    return "\n".join(out) + "\n"


def as_json(explanations: list[Explanation], versions: Setting, source: str,
            faults: Sequence[Described] = ()) -> dict[str, Any]:
    return {
        "input": source,
        "versions": versions.as_dict(),
        "described": [{"id": d.entry.id, "candidate": d.why_not is None, "why_not": d.why_not, "caveat": d.caveat,
                       "words": [{"text": w, "line": n} for w, n in d.words]} for d in faults],
        "exceptions": [{
            **ex.found.as_error(), "line": ex.found.line, "frames": ex.found.frames, "chained": ex.found.chained,
            "one_line": ex.found.one_line, "relays_another": ex.found.wrapper, "type_shown": ex.found.type_shown,
            "known": [{"id": e.id, "title": e.title, "scope": e.scope(), "fix": e.fix,
                       "references": list(e.references)} for e in ex.matches],
            "out_of_range": [{"id": e.id, "why": why} for e, why in ex.out_of_range],
            "candidates": [{"id": e.id, "why": why} for e, why in ex.candidates],
            "closest": [{"id": e.id, "why": why} for e, why in ex.closest],
            "cause": {"cause": ex.cause.cause, "todo": ex.cause.todo} if ex.cause else None,
            "behind": {**ex.root.as_error(), "line": ex.root.line} if ex.root else None,
        } for ex in explanations],
        "exit": exit_status(explanations),
    }


def _gh(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def render_github(explanations: list[Explanation], versions: Setting) -> str:
    """GitHub Actions workflow commands: a notice per known exception, a warning per unknown one."""
    out = []
    for ex in explanations:
        f = ex.found
        head = f"{f.type}: {(f.message.splitlines() or [''])[0][:200]}"
        if ex.matches:
            out.append(ex.matches[0].explain("github", seen=head))
        else:
            extra = "".join(f"\nmatches {e.id}, {why}" for e, why in ex.out_of_range)
            extra += "".join(f"\ncandidate {e.id}: it was {why}" for e, why in ex.candidates)
            if ex.cause is not None:
                extra += f"\nnot a break of the contract: {ex.cause.cause}; what to do: {ex.cause.todo}"
            out.append(f"::warning title=no known breakage::{_gh(head + extra)}")
    out.append(f"::notice title=setting read::{_gh(versions.describe())}")
    return "\n".join(out) + "\n"


def explain_paste(text: str) -> tuple[list[Explanation], Setting]:
    """Every exception of a paste (log, traceback, issue text) matched against the registry, scoped by the
    versions the paste states; the versions found."""
    found = exceptions_in(text)
    versions = read_setting(text)
    return explain_found(found, text, versions, bool(_ABOUT.search(text))), versions


def explain_found(found: list[Found], text: str, versions: Setting, about_vllm: bool) -> list[Explanation]:
    """Each exception found in `text` explained, with the text around it and what the text shows behind it."""
    around = contexts(text, [f.line for f in found])
    return [explain(f, registry=REGISTRY, versions=versions, about_vllm=about_vllm, context=c,
                    root=behind_missing_op(f, text)) for f, c in zip(found, around)]


def read_input(path: str | None, stdin: TextIO) -> str:
    """The paste: standard input (its first MAX_INPUT_BYTES characters), or a regular file within
    compat.shared.results.MAX_INPUT_BYTES (a device, a FIFO or a larger file is refused by name:
    ResultFileError)."""
    if path in (None, "-"):
        return stdin.read(MAX_INPUT_BYTES)
    return read_evidence(Path(path), "input").decode("utf-8", errors="replace")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """explain's own options (--backend is shared: compat.harness.cli)."""
    parser.add_argument("file", nargs="?", default=None, help="log, traceback or cell result (default: stdin)")
    parser.add_argument("--vllm", help="the vLLM version (default: what the paste says)")
    parser.add_argument("--speculators", help="the speculators version (default: what the paste says)")
    parser.add_argument("--format", choices=("text", "json", "github"), default="text")
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None) -> int:
    """`python -m compat.explain ARGS`: `vllm-spec-compat explain ARGS`."""
    from compat.harness.cli import run_command

    return run_command("explain", sys.argv[1:] if argv is None else argv, stdin=stdin)


@neutral_terminal()  # what it prints from a log or a record: compat.shared.neutral
def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None,
             stdin: TextIO | None = None) -> int:
    """Read the paste, find its exceptions and explain each (module docstring); the exit status."""
    stdin = sys.stdin if stdin is None else stdin
    source = args.file if args.file not in (None, "-") else "standard input"
    try:
        text = read_input(args.file, stdin)
    except ResultFileError as exc:
        print(f"explain: {exc} (expected a log, a traceback or a results/<cell>.json file, or '-': stdin)",
              file=sys.stderr)
        return exit_codes.USAGE
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "probes" in data:  # a pasted result file, read as it stands (from_result)
        found = from_result(data)
        backend = str(data["backend"]) if data.get("backend") else None
        versions = Setting(vllm=[(str(data["vllm"]), "result file")] if data.get("vllm") else [],
                           speculators=[(str(data["speculators"]), "result file")] if data.get("speculators") else [],
                           backend=platform_of(backend) if backend else None,
                           backend_evidence="result file" if backend else "")
        about = True
    else:
        found = exceptions_in(text)
        versions = read_setting(text)
        about = bool(_ABOUT.search(text))
    for what in ("vllm", "speculators", "backend"):  # the user's flags win over what the paste says
        if getattr(args, what):
            versions.set_by_flag(what, getattr(args, what))
    if not found:
        crashed = crash_line(text) if data is None else None
        faults = described_faults(text, versions) if data is None and not crashed and about else []
        if crashed:
            print(f"explain: no Python exception in {source}: a process crashed in compiled code ({crashed[:200]!r}); "
                  "no known breakage is a crash and nothing here says the environment caused it: report it where "
                  f"the crashing code lives ({setting_line(versions)})", file=sys.stderr)
        else:
            print(f"explain: no exception found in {source}; expected a Python traceback, a log line or a quoted "
                  "'SomeError: message', or a cell result with broken probes"
                  + ("; the text describes silent faults of the registry: candidates below" if faults else "")
                  + f" ({setting_line(versions)})", file=sys.stderr)
        if args.format == "json":
            print(json.dumps(as_json([], versions, source, faults), indent=2))
        elif faults:
            print(render_described(faults, versions), end="")
        return 1 if crashed else 2
    explanations = explain_found(found, text, versions, about)
    if args.format == "json":
        print(json.dumps(as_json(explanations, versions, source), indent=2))
    elif args.format == "github":
        print(render_github(explanations, versions), end="")
    else:
        print(render(explanations, versions), end="")
    return exit_status(explanations)


if __name__ == "__main__":
    sys.exit(main())
