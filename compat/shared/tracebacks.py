"""One traceback parser for both sides: what a log, a paste or pytest's output says went wrong.

- `exceptions_in(text)`: every exception of the text (type, message, chained ones, the innermost
  vLLM file:line where frames exist; a one-line error has no vLLM file), through log prefixes
  (`(EngineCore pid=1) ERROR 04-21 17:49:59 [core.py:1099] `, Ray, docker compose, timestamps,
  torchrun), Markdown quotes and fences, and pytest's `E   ` lines. `nox -s explain` reads pastes
  with it (compat.harness.explain).
- `root_cause(log_text)`: the one exception a `vllm serve` log failed with: the last one that does
  not only relay another (`RELAYS`: EngineDeadError, "Engine core initialization failed", ...), else
  the last relay; the cell's server runs read their logs with it (compat.cell.server).
- `silent_death(log_text)`: where a whole vLLM log shows a process of its own died without raising
  (only relays printed, no process logged an error, no crash line, exit code -9 or none listed: a
  SIGKILL from the kernel's out-of-memory killer), a `PROCESS_DIED` root cause naming vLLM's last
  word on it; compat.cell.server asks it for a server log whose root cause only relays.
- `behind_missing_op(found, text)`: where a compiled op is missing (`'_OpNamespace' '_C_utils' object has
  no attribute ...`) and the text shows vLLM could not load its compiled library earlier (a WARNING it
  logs and goes on: `Failed to import from vllm._C: ImportError("... CXXABI_1.3.15' not found ...")`),
  that load failure, the cause; else the exception as found.
- `vllm_relative(path)` / `vllm_location(path, line)`: a file's path from its `vllm/` folder on.

Pure: the standard library only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_IPY_FRAME = re.compile(r"^\s*(?:File\s+)?\[?(?P<file>[~/][^\s\]]*\.py)\]?(?:\([^)]*\))?(?::(?P<line>\d+))?,?\s+in\b")
# An exception type as printed: `ValueError`, `vllm.v1.engine.exceptions.EngineDeadError`, a bare `Exception`,
# a module's lower-case one where it is qualified (`struct.error`, `socket.timeout`).
EXCEPTION_TYPE = (r"(?P<qualified>(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Violation|Exit|Interrupt|States)"
                  r"|Exception|(?<=\.)(?:error|timeout|gaierror|herror)\b))")
_EXCEPTION = re.compile(rf"^{EXCEPTION_TYPE}(?::\s?(?P<message>.*))?$")
_INLINE = re.compile(rf"(?:^|(?<=[\s`'\"(\[>*]))(?P<tick>`?){EXCEPTION_TYPE}: (?P<message>\S.*)$")
_IPY_HEADER = re.compile(rf"^{EXCEPTION_TYPE}\s+Traceback \(most recent call last\)")
_PYDANTIC = re.compile(r"^Value error, (?P<message>.+)$")
# pydantic's own error line under the field it names: `Input should be ... [type=literal_error,
# input_value='extract_hidden_states', input_type=str]` (the value refused is on it, not on the first line).
_PYDANTIC_ERROR = re.compile(
    r"^(?P<message>.+?) \[type=(?P<kind>\w+), input_value=(?P<value>.*?)(?:, input_type=\w+)?\]$")
# vLLM V0 logged some exceptions as their repr on a log line of their own, before the traceback
# (`ERROR 05-01 12:00:00 [engine.py:160] OutOfMemoryError('CUDA out of memory. ...')`, MQLLMEngine's
# `logger.exception(repr(e))`); a paste often keeps that line and cuts the traceback under it.
_REPR = re.compile(rf"^{EXCEPTION_TYPE}\((?P<q>['\"])(?P<message>.*?)(?P<closed>(?P=q),?\)\.?)?\s*$")
# vLLM V0's worker processes (multiproc_worker_utils.py) logged `Exception in worker %s while processing method
# %s: %s, %s` with the exception's message (no type) and its traceback: the type stands at the traceback's end.
_WORKER_HEADER = re.compile(r"(?:^|(?<=\s))Exception in worker (?P<process>\S+) "
                            r"while processing method (?P<method>\w+): "
                            r"(?P<message>.*?)(?P<tb>,? ?Traceback \(most recent call last\):?)?\s*$")
_TRACEBACK_NEXT = re.compile(r"^,? ?Traceback \(most recent call last\):?\s*$")  # the header's, on its own line
_RAISE = re.compile(r"^\s*raise (?P<type>[\w.]*[A-Z]\w*)\(")
_PYTEST_SECTION = re.compile(r"^_{3,} .+ _{3,}$")
_PYTEST_LOCATION = re.compile(r'^(?P<file>\S+\.py):(?P<line>\d+):(?: \w+)?\s*$')
_PYTEST_E = re.compile(r"^E(?: {2,}|$)(?P<text>.*)$")
_CHAIN = {"The above exception was the direct cause": "cause", "During handling of the above exception": "context"}
# Prefixes a line can carry, stripped again and again (outermost first).
# Terminal colours (vLLM 0.11 colours its process prefix): with the escape byte, or as a paste keeps them.
ANSI = re.compile(r"\x1b\[[0-9;]*m|\[(?:\d{1,2};\d{1,2}|0)m")
_PREFIXES = [
    re.compile(r"^[\w.-]+\s+\|\s?(?=\S|\s)"),                                   # docker compose: "vllm-1  | "
    re.compile(r"^\s*(?:>\s?)+"),                                                # Markdown quote
    # logging's default
    re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - [\w.]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "),
    # ISO / k8s
    re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?:\s+-\s+|\s+\|\s+|\s)?"),
    re.compile(r"^\[\d{4}-\d\d-\d\d[ T][^\]]*\]\s?"),                           # [2025-04-16 14:22:53 TP3]
    re.compile(r"^\(?[A-Za-z_][\w.-]*(?: [\w.=-]+)*? ?pid=\d+[^()\n]*\)\s?"),    # (EngineCore_DP0 pid=1), (pid=2)
    re.compile(r"^\(pid=\d+[^()\n]*\)\s?"),
    re.compile(r"^\[rank\d+\]:\s?"),                                            # torchrun
    re.compile(r"^(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL) \d{4}-\d\d-\d\dT[\d:.]+Z \[[^\]]*\]\s"),  # GCP
    re.compile(r"^(?:ERROR|INFO|WARNING|WARN|DEBUG|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./-]+:\d+\]\s?"),
]
_FENCE = re.compile(r"^\s*(?:`{3,}|~{3,})[\w+-]*\s*$")
# An exception that only relays another one (explain counts it neither way; a server log's root cause is another).
RELAYS = re.compile(r"EngineDeadError|Engine core initialization failed|EngineCore encountered an issue"
                    r"|Worker failed with error|WorkerError|See root cause above|check the stack trace above"
                    r"|WorkerProc initialization failed|See stack trace for root cause"
                    r"|APIServer|Engine core process \S+ died unexpectedly")
# vLLM's words for a process of its own that ended: a worker or engine core that died (its monitor's
# line), or the exit codes it lists. A SIGKILL (the kernel's OOM killer) or a crash in compiled code
# leaves only these and the relays: the process raised nothing, so nothing else is printed.
_DEATH = re.compile(r"(?:Worker proc|Engine core proc(?:ess)?|Process|RayWorkerProc rank=)\s*\S+ (?:\(PID: \d+\) )?"
                    r"died (?:unexpectedly|with exit code -?\d+)[^\n]*|Failed core proc\(s\): \{[^}\n]*\}")
PROCESS_DIED = "ProcessDied"  # our type for that root cause; vLLM raised nothing
# Exit codes vLLM lists: `Failed core proc(s): {'EngineCore_DP0': -9}`, `died with exit code 1`,
# `exited (code=-9)`, 0.32's `died unexpectedly (exit code: 1)`.
_CODES = re.compile(r"Failed core proc\(s\): \{(?P<procs>[^}\n]*)\}|(?:exit code:?|code=)\s*(?P<code>-?\d+)")
# A process that crashed rather than raised: Python's fault handler, C++'s terminate, the shell's words.
_CRASH = re.compile(r"Fatal Python error|terminate called|^\s*what\(\):|Segmentation fault|core dumped|^\s*Aborted\s*$"
                    r"|Failed: Cuda error|Cuda failure|CUDA error: |c10::Error|Assertion .+ failed", re.M)
# An error logged by an engine-core or worker process (the API server's lines are the relays).
_WORKER_ERROR = re.compile(r"\((?:EngineCore|Worker|VllmWorker|RayWorker)[^)\n]*pid=\d+[^)\n]*\)\s+ERROR\b")
SILENT = "no vLLM process printed an exception"
# vLLM imports its compiled libraries at start; one that cannot load is only a WARNING there
# (vllm/platforms/interface.py, `logger.warning("Failed to import from vllm._C: %r", e)`), and the first op
# it holds fails later as a missing attribute. That op failing is MISSING_OP; the load failure is the cause.
_UNLOADED = re.compile(r"Failed to import from (?P<module>vllm\.[\w.]+):? (?:with )?(?P<type>[A-Z]\w*Error)\("
                       r"(?P<q>['\"])(?P<message>.*?)(?P=q),?\)\s*$")
MISSING_OP = (r"_OpNamespace'? '\w+' object has no attribute|torch\.ops\.\w+\.\w+.* (?:not found|missing)"
              r"|Could not run '\w+::\w+' with arguments|name 'vllm_\w*ops' is not defined")  # vLLM <= 0.4's alias
_MISSING_OP_TYPES = ("AttributeError", "RuntimeError", "NotImplementedError", "NameError")
_OP_NAMESPACE = re.compile(r"_OpNamespace'? '(?P<space>\w+)'|torch\.ops\.(?P<ops>\w+)\.|Could not run '(?P<run>\w+)::"
                           r"|name 'vllm_\w*ops'")
# A log line at a level below ERROR: an exception named there is advice ("can cause `OSError: ...`"), not a failure.
_CALM = re.compile(r"\b(?:INFO|WARNING|WARN|DEBUG)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d|\b(?:INFO|WARNING|DEBUG)\s+-\s")


def strip_line(line: str) -> str:
    """The line without log prefixes, quote marks, fences and its trailing newline."""
    line = ANSI.sub("", line.rstrip("\r\n"))
    for _ in range(8):
        before = line
        for prefix in _PREFIXES:
            line = prefix.sub("", line, count=1)
        if line == before:
            break
    if _FENCE.match(line):
        return ""
    return re.sub(r"^(`{3,})(.*?)(`{3,})?\s*$", lambda m: m.group(2), line)


@dataclass
class Found:
    """One exception found in the input."""

    type: str
    message: str
    where: str | None
    line: int  # 1-based line of the input where the exception line stands (0: from a result file)
    frames: list[str] = field(default_factory=list)  # vLLM file:line of its traceback, outermost first
    chained: str | None = None  # "cause" / "context": raised while handling the exception before it
    one_line: bool = False  # no traceback: quoted in prose, a title or a bare line
    qualified: str = ""  # the type as written (`vllm.v1.engine.exceptions.EngineDeadError`), where it was
    logged_only: bool = False  # vLLM logged it as a warning and went on (`Failed to import from vllm._C: ...`)
    type_shown: bool = True  # False: the text gives its message only (V0's worker header, its traceback cut)

    def as_error(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "where": self.where}

    @property
    def wrapper(self) -> bool:
        return bool(RELAYS.search(f"{self.type}: {self.message}"))


def vllm_relative(filename: str) -> str | None:
    """`.../site-packages/vllm/v1/core/block_pool.py` -> `vllm/v1/core/block_pool.py` (the innermost
    `vllm` folder of the path); None for a file outside vLLM."""
    parts = PurePath(str(filename).replace("\\", "/")).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "vllm" and i + 1 < len(parts):
            return None if i and parts[i - 1] == ".cache" else "/".join(parts[i:])  # ~/.cache/vllm: compiled code
    return None


def vllm_location(filename: str, line: str | int | None) -> str | None:
    """`vllm/...py:LINE` of a frame in vLLM, None for a frame outside it."""
    rel = vllm_relative(filename)
    return f"{rel}:{line}" if rel and line else rel


def exception_type(m: re.Match[str]) -> str:
    """The type an EXCEPTION_TYPE match names: its short name, or qualified where the short one is a
    module's lower-case one (`struct.error`)."""
    name: str = m.group("type") if m.group("type")[0].isupper() else m.group("qualified")
    return name


# A log record's time (left out when two lines' prefixes are compared: one record's lines may differ in it).
_TIMES = re.compile(r"\d{4}-\d\d-\d\d[T ][\d:.,]+Z?|\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?|\d\d:\d\d:\d\d(?:[.,]\d+)?")
# A line that starts another record or another process's output, not a message's next line.
_NEW_RECORD = re.compile(r"^(?:\[?(?:ERROR|INFO|WARNING|WARN|DEBUG|CRITICAL)\]?\s|Process [\w-]+:$)")


def _prefix(raw: str, stripped: str) -> str:
    """What `strip_line` took off a line, its times left out."""
    at = raw.rfind(stripped.strip()) if stripped.strip() else -1
    return _TIMES.sub("", raw[:at] if at >= 0 else raw).strip()


def _continuation(lines: list[str], j: int, limit: int = 12,
                  raw_lines: list[str] | None = None) -> tuple[list[str], int]:
    """The lines that go on an exception's message (it starts on line j - 1): up to a blank line, a frame, another
    exception, or a line another log record or process printed (its prefix differs from the exception's)."""
    out: list[str] = []
    own = _prefix(raw_lines[j - 1], lines[j - 1]) if raw_lines else ""
    while j < len(lines) and len(out) < limit:
        s = lines[j].strip()
        if (not s or "Traceback (most recent call last)" in s or _FRAME.match(s) or _EXCEPTION.match(s)
                or _PYTEST_E.match(lines[j]) or s.startswith(tuple(_CHAIN)) or s.startswith("#")
                or _NEW_RECORD.match(s)):
            break
        if raw_lines and (other := _prefix(raw_lines[j], lines[j])) and other != own:
            break
        out.append(s)
        j += 1
    return out, j


def find_exceptions(text: str) -> list[Found]:
    """Every exception of a paste: those ending a traceback (with the innermost vLLM frame), chained ones,
    and one-line errors standing alone or quoted in prose (no vLLM file)."""
    raw_lines = text.splitlines()
    lines = [strip_line(line) for line in raw_lines]
    found: list[Found] = []
    frames: list[str] = []
    in_traceback, chained = False, None
    i = 0
    while i < len(lines):
        raw = lines[i]
        s = raw.strip()
        if not s or _PYTEST_E.match(raw):
            i += 1
            continue
        m = _WORKER_HEADER.search(s)
        if m:
            rest, j = _continuation(lines, i + 1, raw_lines=raw_lines)
            message, tb = m.group("message"), bool(m.group("tb"))
            if not tb and j < len(lines) and _TRACEBACK_NEXT.match(lines[j].strip()):
                tb, j = True, j + 1
            message = "\n".join([message, *rest]).strip()
            header = _worker_header(lines, raw_lines, j, message, i + 1) if tb else Found(
                "Exception", message, None, i + 1, [], None, one_line=True, type_shown=False)
            if header is not None:
                found.append(header)
            in_traceback, frames, chained = tb, [], None
            i = j
            continue
        if "Traceback (most recent call last)" in s or _IPY_HEADER.match(s):
            in_traceback, frames = True, []
            i += 1
            continue
        chain = next((kind for head, kind in _CHAIN.items() if s.startswith(head)), None)
        if chain:
            chained = chain
            i += 1
            continue
        m = _FRAME.match(s) or (_IPY_FRAME.match(s) if in_traceback else None)
        if m:
            in_traceback = True
            loc = vllm_location(m.group("file"), m.group("line"))
            if loc:
                frames.append(loc)
            i += 1
            continue
        m = _EXCEPTION.match(s)
        if m and (m.group("message") is not None or in_traceback or m.group("type") == "AssertionError"):
            rest, j = _continuation(lines, i + 1, raw_lines=raw_lines)
            message = "\n".join([m.group("message") or "", *rest]).strip().rstrip("`").strip()
            found.append(Found(exception_type(m), message, frames[-1] if frames else None, i + 1, list(frames),
                               chained, one_line=not in_traceback, qualified=m.group("qualified")))
            in_traceback, frames, chained = False, [], None
            i = j
            continue
        m = _PYDANTIC.match(s)
        if m:
            found.append(Found("ValidationError", s, frames[-1] if frames else None, i + 1, list(frames),
                               chained, one_line=not in_traceback))
            i += 1
            continue
        m = _REPR.match(s)
        if m and not raw[:1].isspace() and not _CALM.search(raw_lines[i]):
            found.append(Found(exception_type(m), _repr_message(m), None, i + 1, [], None, one_line=True,
                               qualified=m.group("qualified")))
            in_traceback, frames, chained = False, [], None
            i += 1
            continue
        m = _UNLOADED.search(s)
        if m:  # only a WARNING, but the ImportError vLLM swallowed (what fails later is a missing op)
            found.append(Found(m.group("type"), _unquoted(m.group("message")), None, i + 1, [], None, one_line=True,
                               logged_only=True))
            i += 1
            continue
        m = _INLINE.search(s)
        if m and not m.group("type")[0].isupper():  # `x.error: ...` in prose is no exception; at a line's start it is
            m = None
        if m and not in_traceback and not _CALM.search(raw_lines[i]):
            message = m.group("message")
            if m.group("tick"):
                message = message.split("`", 1)[0]
            found.append(Found(m.group("type"), message.strip().rstrip("`").strip(), None, i + 1, [], None,
                               one_line=True))
        i += 1
    return _dedupe(found)


def _repr_message(m: re.Match[str]) -> str:
    """The message of an exception written as its repr (`OutOfMemoryError('CUDA out of ...\\n...')`), unescaped;
    a repr cut at the line's end (a paste's) as far as it goes."""
    body, quote = m.group("message"), m.group("q")
    try:
        return str(ast.literal_eval(quote + body + quote))
    except (ValueError, SyntaxError):
        return _unquoted(body.replace("\\n", "\n"))


def _worker_header(lines: list[str], raw_lines: list[str], j: int, message: str, at: int) -> Found | None:
    """V0's worker header followed by its traceback (from line j): None where the traceback ends with its exception
    (that line is read as any traceback's); where it is cut before, the header's message, its type the one the
    innermost `raise X(...)` shown names, else not shown, and the vLLM frames shown."""
    frames, raised = [], None
    while j < len(lines):
        s = lines[j].strip()
        if _EXCEPTION.match(s) and not lines[j][:1].isspace():
            return None
        frame = _FRAME.match(s)
        if frame:
            if loc := vllm_location(frame.group("file"), frame.group("line")):
                frames.append(loc)
        elif not s or not (lines[j][:1].isspace() or set(s) <= set("^~ ")):
            break
        elif r := _RAISE.match(lines[j]):
            raised = r.group("type").rsplit(".", 1)[-1]
        j += 1
    return Found(raised or "Exception", message, frames[-1] if frames else None, at, frames, None,
                 type_shown=raised is not None)


def exceptions_in(text: str) -> list[Found]:
    """Every exception a paste shows, once each (tracebacks, pytest's E lines, one-line errors)."""
    return _dedupe(find_exceptions(text) + find_pytest_failures(text))


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]


def _dedupe(found: list[Found]) -> list[Found]:
    """One entry per exception: a title or a log's second print of the same error is dropped (the one
    with a place or the longer message kept); `pydantic_core._pydantic_core.ValidationError` and a
    progress line's `ValidationError` are one type."""
    out: list[Found] = []
    for f in found:
        head = f.message.splitlines()[0].strip() if f.message else ""
        twin = next((o for o in out if (_short(o.type) == _short(f.type) or not (o.type_shown and f.type_shown)) and (
            (o.message.splitlines()[0].strip() if o.message else "").startswith(head[:60])
            or head.startswith((o.message.splitlines()[0].strip() if o.message else "")[:60]))), None)
        if twin is None:
            out.append(f)
        elif twin.type_shown != f.type_shown:  # the one whose type is shown, placed where the other is if it is not
            typed, other = (f, twin) if f.type_shown else (twin, f)
            out[out.index(twin)] = typed if typed.where or not other.where else replace(
                typed, where=other.where, frames=list(other.frames))
        elif (f.where and not twin.where) or (twin.one_line and not f.one_line) or (
                bool(f.where) == bool(twin.where) and twin.one_line == f.one_line
                and len(f.message) > len(twin.message)):
            out[out.index(twin)] = f
    return out


def find_pytest_failures(text: str) -> list[Found]:
    """The exception of each failure section of pytest's output (`E   Type: message` lines), with the
    innermost vLLM location among the section's `<path>.py:<line>:` lines."""
    found: list[Found] = []
    sections: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = strip_line(line)
        if _PYTEST_SECTION.match(line.strip()) or not sections:
            sections.append((number, []))
        sections[-1][1].append(line)
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


def headline(found: Found) -> str:
    """The exception as one line: `Type: first line of the message`; for a pydantic validation error
    its `Value error, ...` line, which says what was refused, or else the field, pydantic's error and the
    value it refused (`... for SpeculativeConfig: method: Input should be 'ngram', ...
    (got 'extract_hidden_states')`)."""
    lines = [line.strip() for line in found.message.splitlines()]
    value_error = next((line for line in lines if _PYDANTIC.match(line)), None)
    if value_error:
        return value_error
    first = lines[0] if lines else ""
    written = found.qualified or found.type
    refused = next(((i, m) for i, line in enumerate(lines) if i > 0 and (m := _PYDANTIC_ERROR.match(line))), None)
    if refused:  # `1 validation error for X`: say which field refused which value, as pydantic's next lines do
        i, m = refused
        field = lines[i - 1] if i > 1 else "?"
        return f"{written}: {first}: {field}: {m.group('message')} (got {m.group('value')})"
    return f"{written}: {first}" if first else written


# vLLM's relay that quotes the error it relays: `Worker failed with error 'MESSAGE', please check ...`.
_QUOTES = re.compile(r"failed with error '(?P<quoted>.+?)'(?:,|$)", re.S)


def _exit_codes(text: str) -> list[int]:
    """Every exit code vLLM lists for its processes in the text."""
    codes = []
    for m in _CODES.finditer(text):
        listed = m.group("procs")
        codes += [int(c) for c in re.findall(r":\s*(-?\d+)", listed)] if listed is not None else [int(m.group("code"))]
    return codes


def silent_death(log_text: str) -> Found | None:
    """Where a whole vLLM log shows one of its processes died without raising: a `PROCESS_DIED`
    naming vLLM's last word on it. Evidence, not absence: only relays were printed (none quotes an
    error), every traceback ends in one of them, no engine-core or worker process logged an error
    beside vLLM's own "died" line, no crash line (`Fatal Python error`, `terminate called`), and every
    exit code vLLM lists is -9 (SIGKILL: the kernel's out-of-memory killer) or none is listed (vLLM
    often lists `{}`: the process was gone before it looked). An exit code > 0 means it raised; another
    signal, a crash in compiled code: both left for a person (None). Only for vLLM's own logs, never a
    client's (whose "500 ... EngineCore encountered an issue" is a reply, not vLLM's output)."""
    found = [f for f in find_exceptions(log_text) if not f.logged_only]  # a load warning: vLLM went on
    if not found or any(not f.wrapper or _QUOTES.search(f.message) for f in found):
        return None
    lines = [strip_line(line) for line in log_text.splitlines()]
    text = "\n".join(lines)
    tracebacks = sum("Traceback (most recent call last)" in line for line in lines)
    if tracebacks > sum(not f.one_line for f in found) or _CRASH.search(text):
        return None
    if any(_WORKER_ERROR.search(raw) and not _DEATH.search(raw) and not RELAYS.search(raw)
           for raw in ANSI.sub("", log_text).splitlines()):  # the process prefix kept, its colours not
        return None
    codes = _exit_codes(text)
    if any(code != -9 for code in codes):
        return None
    deaths = [m.group(0).strip() for line in lines for m in [_DEATH.search(line)] if m]
    said = deaths[-1] if deaths else headline(found[-1])
    how = " (SIGKILL)" if codes else ""
    return Found(PROCESS_DIED, f"{said.rstrip('.')}; {SILENT}{how}", None, 0, one_line=True)


def _unquoted(message: str) -> str:
    return message.replace("\\'", "'").replace('\\"', '"')


def crash_line(text: str) -> str | None:
    """The first line of the text where a process crashed in compiled code rather than raised."""
    m = _CRASH.search("\n".join(strip_line(line) for line in text.splitlines()))
    return m.string[m.start():].split("\n", 1)[0].strip() if m else None


def _registers(module: str, message: str) -> bool:
    """Whether the compiled library `module` (vllm._C) registers the op namespace the message names
    (`_C_utils`; vLLM <= 0.4's `vllm_ops` alias is vllm._C's)."""
    m = _OP_NAMESPACE.search(message)
    namespace: str | None = (m.group("space") or m.group("ops") or m.group("run") or "_C") if m else None
    return namespace is not None and namespace.startswith(module.rsplit(".", 1)[-1])


def behind_missing_op(found: Found | None, text: str) -> Found | None:
    """`found`, or where it is a compiled op missing (an AttributeError/RuntimeError/NotImplementedError/
    NameError naming it) and `text` shows, before it, vLLM's warning that the library registering that op
    could not load, that load failure (the last such), naming the op that then failed."""
    if (found is None or found.type.rsplit(".", 1)[-1] not in _MISSING_OP_TYPES
            or not re.search(MISSING_OP, found.message)):
        return found
    lines = ANSI.sub("", text).splitlines()
    for i, line in reversed(list(enumerate(lines[:found.line - 1] if found.line > 0 else lines))):
        m = _UNLOADED.search(line)
        if m and _registers(m.group("module"), found.message):
            message = _unquoted(m.group("message"))
            return Found(m.group("type"), f"{message}; vLLM went on without {m.group('module')}, then "
                         f"{found.type}: {found.message.splitlines()[0][:300]}", found.where, i + 1, one_line=True)
    return found


def root_cause(log_text: str) -> Found | None:
    """The exception a server log failed with: the one the last relay quoting an error names (a
    worker's exception; a process can fail again on its way out, e.g. a CPU build's shutdown asking
    for CUDA), else the last one that does not only relay another, else the last relay; None when the
    log states none. (A server log that holds only relays: `silent_death`, compat.cell.server.)"""
    found = [f for f in find_exceptions(log_text) if not f.logged_only]  # only behind a missing op (below)
    causes = [f for f in found if not f.wrapper]
    quoting = [m.group("quoted").strip() for f in found if f.wrapper for m in [_QUOTES.search(f.message)] if m]
    named = [f for f in causes if quoting and f.message.strip() == quoting[-1]]
    pool = named or causes or found
    return behind_missing_op(pool[-1] if pool else None, log_text)
