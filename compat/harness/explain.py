"""`nox -s explain -- FILE` (or a log on standard input): which known breakage is this traceback?

    python -m compat.explain LOG_OR_RESULT [--vllm V] [--speculators S] [--backend cpu|gpu]

Reads a pasted traceback, a failing log (a server log, a worker's log lines, pytest's output), or a
cell result file
(results/<cell>.json), finds each exception in it (type, message, the innermost vLLM file:line
of its traceback) and matches it against the registry with the same matcher the report uses
(compat.harness.breakages.Symptom). For each: the breakages it matches (title, since which vLLM
release, which speculators releases, on which backend it was observed, the fix, references),
or "no known breakage matches" with the closest candidates and why each was rejected.

Exit status: 0 when every exception found matches a known breakage, 1 when one does not,
2 when the input holds no exception or cannot be read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Sequence, TextIO

from compat.harness.breakages import REGISTRY, Breakage

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_EXCEPTION = re.compile(
    r"^(?:\(\w+ pid=\d+\)\s*)?(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Violation|Exit|Interrupt|Warning|States))"
    r"(?::\s?(?P<message>.*))?$")
_PYTEST_SECTION = re.compile(r"^_{3,} .+ _{3,}$")
_PYTEST_LOCATION = re.compile(r'^(?P<file>\S+\.py):(?P<line>\d+):(?: \w+)?\s*$')
_PYTEST_E = re.compile(r"^E(?: {2,}|$)(?P<text>.*)$")
_LOG_PREFIX = re.compile(r"^(?:\(\w+(?: pid=\d+)?\)\s*|\[[^\]]*\]\s*|(?:ERROR|INFO|WARNING|DEBUG)\s+\S+\s+\S+\s+\[[^\]]*\]\s*)+")


@dataclass
class Found:
    """One exception found in the input."""

    type: str
    message: str
    where: str | None
    line: int  # 1-based line of the input where the exception line stands
    frames: list[str] = field(default_factory=list)

    def as_error(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "where": self.where}


def vllm_location(filename: str, line: str) -> str | None:
    parts = PurePath(filename).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "vllm" and i + 1 < len(parts):
            return f"{'/'.join(parts[i:])}:{line}"
    return None


def _strip(line: str) -> str:
    return _LOG_PREFIX.sub("", line.rstrip("\n"))


def find_exceptions(text: str) -> list[Found]:
    """Every exception that ends a traceback, with the innermost vLLM frame of that traceback."""
    lines = [_strip(line) for line in text.splitlines()]
    found: list[Found] = []
    frames: list[str] = []
    in_traceback = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Traceback (most recent call last)"):
            in_traceback, frames = True, []
        elif in_traceback and (m := _FRAME.match(line)):
            loc = vllm_location(m.group("file"), m.group("line"))
            if loc:
                frames.append(loc)
        elif in_traceback and not line.startswith((" ", "\t")) and (m := _EXCEPTION.match(line.strip())):
            message_lines = [m.group("message") or ""]
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("Traceback") \
                    and not _FRAME.match(lines[j]) and len(message_lines) < 12 \
                    and not lines[j].startswith(("The above exception", "During handling")):
                message_lines.append(lines[j].strip())
                j += 1
            message = "\n".join(message_lines).strip()
            found.append(Found(m.group("type"), message, frames[-1] if frames else None, i + 1, list(frames)))
            in_traceback = False
            i = j
            continue
        i += 1
    return found


def find_pytest_failures(text: str) -> list[Found]:
    """The exception of each failure section of pytest's output (`E   Type: message` lines), with the
    innermost vLLM location among the section's `path.py:line:` lines."""
    found: list[Found] = []
    sections: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if _PYTEST_SECTION.match(line.strip()) or not sections:
            sections.append((number, []))
        sections[-1][1].append(line.rstrip("\n"))
    for start, lines in sections:
        frames = [loc for line in lines if (m := _PYTEST_LOCATION.match(line))
                  and (loc := vllm_location(m.group("file"), m.group("line")))]
        blocks: list[tuple[int, list[str]]] = []
        for offset, line in enumerate(lines):
            m = _PYTEST_E.match(line)
            if not m:
                continue
            if blocks and blocks[-1][0] + len(blocks[-1][1]) == offset:
                blocks[-1][1].append(m.group("text").strip())
            else:
                blocks.append((offset, [m.group("text").strip()]))
        for offset, block in reversed(blocks):
            head = _EXCEPTION.match(block[0])
            if head:
                message = "\n".join([head.group("message") or "", *block[1:]]).strip()
                found.append(Found(head.group("type"), message, frames[-1] if frames else None, start + offset, frames))
                break
    return found


def from_result(cell: dict[str, Any]) -> list[Found]:
    """The failures recorded in a cell result file, as if read from a log."""
    out = []
    for probe in cell.get("probes") or []:
        error = probe.get("error") or {}
        if probe.get("status") == "broken" and error.get("type"):
            out.append(Found(str(error["type"]), str(error.get("message") or ""), error.get("where"), 0,
                             [f"probe {probe['id']}" + (f"[{probe['case']}]" if probe.get("case") else "")]))
    return out


@dataclass
class Explanation:
    found: Found
    matches: list[Breakage]
    closest: list[tuple[Breakage, str]]


def _closeness(entry: Breakage, error: dict[str, Any]) -> int:
    """How many of type, message and place fit (for ranking rejected candidates)."""
    s = entry.symptom
    short = str(error.get("type") or "").rsplit(".", 1)[-1]
    score = int(short in s.exception)
    score += int(bool(s.message) and bool(re.search(s.message, str(error.get("message") or ""))))
    score += int(bool(s.where) and bool(re.search(s.where, str(error.get("where") or ""))))
    return score


def explain(found: Found, vllm: str | None = None, speculators: str | None = None, backend: str | None = None,
            registry: tuple[Breakage, ...] = REGISTRY) -> Explanation:
    entries = [e for e in registry if not e.symptom.silent]
    if vllm and speculators:
        entries = [e for e in entries if e.applies(vllm, speculators, backend or "cpu")] if backend else \
            [e for e in entries if any(e.applies(vllm, speculators, b) for b in e.backends)]
    error = found.as_error()
    matches, rejected = [], []
    for entry in entries:
        why_not = entry.symptom.mismatch(error)
        if why_not is None:
            matches.append(entry)
        else:
            rejected.append((entry, why_not))
    rejected.sort(key=lambda pair: -_closeness(pair[0], error))
    return Explanation(found, matches, [r for r in rejected if _closeness(r[0], error) > 0][:3])


def describe_entry(entry: Breakage) -> list[str]:
    return [
        f"  known breakage {entry.id}: {entry.title}",
        f"    since vLLM {entry.introduced_in}" + (f", gone in {entry.removed_in}" if entry.removed_in else "")
        + f"; speculators {entry.affects}; observed on {', '.join(entry.backends) or 'no backend (inferred)'}",
        f"    fix: {entry.fix}",
        *(f"    see: {ref}" for ref in entry.references),
    ]


def render(explanations: list[Explanation]) -> str:
    out = []
    for ex in explanations:
        f = ex.found
        head = f"{f.type}: {f.message.splitlines()[0][:160] if f.message else ''}"
        out.append(f"{head}\n  raised at {f.where or 'no vLLM frame'}" + (f" (input line {f.line})" if f.line else ""))
        if ex.matches:
            for entry in ex.matches:
                out.extend(describe_entry(entry))
        else:
            out.append("  no known breakage matches")
            for entry, why in ex.closest:
                out.append(f"    closest: {entry.id} ({entry.title}): rejected, {why}")
        out.append("")
    return "\n".join(out)


def read_input(path: str | None, stdin: TextIO) -> str:
    if path in (None, "-"):
        return stdin.read()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        raise SystemExit(f"explain: cannot read {path}: {exc.strerror or exc}; expected a log, a traceback "
                         "or a results/<cell>.json file (or '-' for standard input)") from exc


def main(argv: Sequence[str] | None = None, stdin: TextIO = sys.stdin) -> int:
    parser = argparse.ArgumentParser(prog="nox -s explain --", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", default=None, help="log, traceback or cell result (default: stdin)")
    parser.add_argument("--vllm", help="only entries expected for this vLLM version (with --speculators)")
    parser.add_argument("--speculators", help="only entries expected for this speculators version")
    parser.add_argument("--backend", choices=("cpu", "gpu"), help="only entries observed on this backend")
    args = parser.parse_args(argv)
    if bool(args.vllm) != bool(args.speculators):
        parser.error("--vllm and --speculators go together (a pair decides which entries apply)")
    text = read_input(args.file, stdin)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "probes" in data:
        found = from_result(data)
    else:
        found = find_exceptions(text) + find_pytest_failures(text)
    if not found:
        print(f"explain: no exception found in {args.file if args.file not in (None, '-') else 'standard input'}; expected a Python traceback "
              "(a 'Traceback (most recent call last):' block) or a cell result with broken probes", file=sys.stderr)
        return 2
    explanations = [explain(f, args.vllm, args.speculators, args.backend) for f in found]
    print(render(explanations), end="")
    return 0 if all(ex.matches for ex in explanations) else 1


if __name__ == "__main__":
    sys.exit(main())
