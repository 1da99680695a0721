"""The model of a known breakage (`Breakage`, `Symptom`, `Prose`) and its matching: what compat.shared.breakages
builds its entries with, and how a probe's failure or a user's paste is fitted to one.

The entries are data in compat.shared.breakages (`_ENTRIES`, read as `REGISTRY` and `BY_ID`), which re-exports
every name here: import them from there. Nothing here imports vLLM or speculators.

Versions: `introduced_in` is the first vLLM release that shows the breakage; `removed_in`
(optional) the first release where it is gone again. `affects` is a PEP 440 specifier on the
speculators version. `backends` says where it was observed. References are upstream pull
requests and issues, or docs/findings.md#<id> (what was read in which wheels or measured, with the
figures). An entry holds what matching and the report need, no account of where it was observed: that is
its `findings` section, which the report's JSON links as the entry's `notes`.

Symptoms: `exception` lists accepted exception type names (bare names; a qualified name in a
result such as `pydantic_core._pydantic_core.ValidationError` matches `ValidationError`);
`message` is a regex searched (re.search) in the probe's error message. Silent breakages
(`silent=True`) produce no exception: they are seen by the reference probe
(`hidden_states_match_reference`), and `cases` is a regex on that probe's `case`. A result can
also name its breakage explicitly with `probe["detail"]["breakage"] = "<id>"`. A data fault may carry `prose`:
how a user reports it in words with no exception (`nox -s explain` lists it as a candidate only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from compat.shared.axes import BACKENDS as BACKENDS  # compat.shared.breakages re-exports it

REFERENCE_PROBE = "hidden_states_match_reference"

FINDINGS = "docs/findings.md"  # what was read or measured, one section per entry id


EMPTY_MESSAGE = r"\A\Z"  # a bare `assert` in vLLM: only with a `where` that names the file
NOT_IN_VLLM = None  # `where` of a failure raised outside vLLM (speculators' code or our check)
WHERE_ANY = r""  # raised anywhere (in vLLM or not): for failures the message alone pins down

# Data symptoms, derived from a reference comparison's detail (data_symptoms below).
DATA_SYMPTOMS = ("rows_missing", "rows_extra", "sequences_reordered", "sequences_missing",
                 "values_wrong", "layers_wrong")


@dataclass(frozen=True)
class Symptom:
    """How a breakage shows up in a probe result.

    An exception symptom fits only when the exception type, the message and the vLLM file:line
    where it was raised all fit (`where` is a regex searched in it; NOT_IN_VLLM means the failure
    must carry no vLLM location). A silent symptom (no exception from vLLM: our comparison failed)
    fits only in the cases it names and with one of the data symptoms it names.
    """

    exception: tuple[str, ...] = ()
    message: str = ""
    where: str | None = NOT_IN_VLLM
    silent: bool = False
    description: str = ""
    cases: str | None = None
    data: tuple[str, ...] = ()
    # Raised while Python or pydantic binds the call's arguments (TypeError, ValidationError): there is
    # no vLLM frame, so an error without `where` fits (the message names the callee); one with a `where`
    # must still match it.
    binding: bool = False
    # explain only (user symptoms): a regex the text around the exception in a paste must show, where the
    # message alone is too generic to name the entry (compat.harness.explain_context says which text).
    context: str | None = None

    def __post_init__(self) -> None:
        unknown = set(self.data) - set(DATA_SYMPTOMS)
        if unknown:
            raise ValueError(f"unknown data symptom(s) {sorted(unknown)}; expected some of {DATA_SYMPTOMS}")
        if self.silent and not (self.cases and self.data):
            raise ValueError("a silent symptom names its cases and its data symptoms")
        if not self.silent and not (self.exception and self.message):
            raise ValueError("an exception symptom names its exception types and a message pattern")
        if self.message == EMPTY_MESSAGE and not self.where:
            raise ValueError("an empty-message symptom names the vLLM file it is raised in")

    def expects_case(self, case: str | None) -> bool:
        return self.cases is None or bool(case and re.search(self.cases, case))

    def mismatch(self, error: dict[str, Any] | None, case: str | None = None,
                 data: set[str] | frozenset[str] = frozenset()) -> str | None:
        """None when a probe's failure fits this symptom, else why not (one line)."""
        if not self.expects_case(case):
            return f"case {case!r} is not one of /{self.cases}/"
        etype = str((error or {}).get("type") or "")
        short = etype.rsplit(".", 1)[-1]
        if self.silent:
            if error and etype and short not in self.exception:
                return f"raised {short}, not a silent data fault ({'/'.join(self.exception)})"
            if not data:
                return f"data symptoms none, expected one of {list(self.data)}"
            unexplained = sorted(set(data) - set(self.data))
            if unexplained:
                return f"data symptoms {sorted(data)}: {unexplained} not among {list(self.data)}"
            return None
        if not error or not etype:
            return f"no exception recorded, expected {'/'.join(self.exception)}"
        if short not in self.exception and etype not in self.exception:
            return f"raised {short}, expected {'/'.join(self.exception)}"
        message = str(error.get("message") or "")
        if not re.search(self.message, message):
            return f"message {message[:80]!r} does not match /{self.message}/"
        if self.context is not None and not re.search(self.context, str(error.get("context") or "")):
            return f"raised where the entry was never observed (the paste shows no /{self.context}/ around it)"
        where = str(error.get("where") or "")
        if self.binding and not where:
            return None
        if self.where is NOT_IN_VLLM:
            if where:
                return f"raised in {where}, expected outside vLLM"
        elif not re.search(self.where, where):
            return f"raised at {where or 'no vLLM frame'}, expected /{self.where}/"
        return None

    def matches(self, error: dict[str, Any] | None, case: str | None = None,
                data: set[str] | frozenset[str] = frozenset()) -> bool:
        return self.mismatch(error, case, data) is None


def data_symptoms(detail: dict[str, Any]) -> set[str]:
    """The data faults a reference comparison's detail shows (see compat.cell.reference.compare)."""
    found: set[str] = set()
    returned, expected = detail.get("rows_returned"), detail.get("rows_expected")
    if isinstance(returned, list) and isinstance(expected, list):
        if any(r < e for r, e in zip(returned, expected)):
            found.add("rows_missing")
        if any(r > e for r, e in zip(returned, expected)):
            found.add("rows_extra")
        if len(returned) < len(expected):
            found.add("sequences_missing")
    matches = detail.get("sequence_matches")
    if detail.get("returned_order") or (
            isinstance(matches, list) and matches and all(isinstance(m, list) and len(m) == 1 for m in matches)
            and sorted(m[0] for m in matches) == list(range(len(matches)))
            and [m[0] for m in matches] != list(range(len(matches)))):
        found.add("sequences_reordered")
    for text in detail.get("problems") or []:
        text = str(text)
        shape = re.search(r"shape \[(\d+)[^\]]*\], expected \[(\d+)", text)
        if shape:
            got, want = int(shape.group(1)), int(shape.group(2))
            if got != want:  # same rows, other width: no row symptom
                found.add("rows_missing" if got < want else "rows_extra")
        elif "max abs error" in text and "sequences_reordered" not in found:
            found.add("values_wrong")
        elif re.search(r"\d+ sequences returned, \d+ sent", text):
            found.add("sequences_missing")
    for pair in detail.get("layer_semantics") or []:
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and None not in pair and pair[0] != pair[1]:
            found.add("layers_wrong")
    return found


# What turns a data fault on, in a user's words (Prose.situation): the feature named, and not as turned off
# (`--no-enable-prefix-caching`, `enable_prefix_caching=False`, "with prefix caching disabled").
def _turned_on(words: str) -> str:
    return (rf"(?<!no[-_]enable[-_])(?<!disable[-_ ])(?<!without )(?:{words})"
            r"(?![\w-]*\s*(?:=\s*False|(?:is |was )?(?:disabled|off)\b))")


PREFIX_CACHING = _turned_on(r"prefix[-_ ]?cach|\bAPC\b|shared prefix|common prefix|cached prefix")
CHUNKED_PREFILL = _turned_on(r"chunked[-_ ]?prefill")
MANY_PROMPTS = (r"(?:more than|over|above) (?:ten|10|[1-9]\d+) prompts|\b(?:1[1-9]|[2-9]\d|\d{3,}) prompts"
                r"|many prompts|(?:one|a single|the same) generate\(\) call|request[-_ ]ids?")


@dataclass(frozen=True)
class Prose:
    """How a user reports a data fault in words, in an issue with no exception: explain's reading of such a
    report (compat.harness.explain_prose), never the probes'. `situation` is a regex (case-insensitive) the
    report must show: when the fault shows (prefix caching on, chunked prefill on, many prompts in one call);
    `data` what comes back wrong, as DATA_SYMPTOMS (explain_prose.DATA_WORDS holds a user's words for each)."""

    situation: str
    data: tuple[str, ...]

    def __post_init__(self) -> None:
        re.compile(self.situation)
        unknown = set(self.data) - set(DATA_SYMPTOMS)
        if not self.data or unknown:
            raise ValueError(f"a report in words names some of {DATA_SYMPTOMS}, not {sorted(unknown) or 'none'}")


@dataclass(frozen=True)
class Breakage:
    id: str
    title: str
    introduced_in: str
    affects: str
    symptom: Symptom
    fix: str
    backends: tuple[str, ...]  # where it was observed; it applies nowhere else
    # the repair that with_compat applies (compat/cell/adapters/generator.py id or launch flag)
    adapter: str | None = None
    references: tuple[str, ...] = ()
    advisory: bool = False
    probe: str | None = None  # probe id that detects it; defaults to the id
    removed_in: str | None = None
    # The environment shim that keeps this failure out of every run of ours (a CPU-build limit):
    # explain still names it, but a passing probe is not "fixed".
    prevented_by: str | None = None
    # A fault keyed on timing (a race): a run where its probe passes does not show it fixed, so a pass reads as
    # expected, with the entry named, never `fixed`.
    intermittent: bool = False
    # What a user sees in their own log when an entry was observed only through a probe case (a case
    # regex no user log carries) or in a message too generic to name it alone: read by explain only,
    # never by the probe classification. Which models it was observed on: the entry's findings section.
    user_symptom: Symptom | None = None
    # A data fault (a silent symptom, or one the reference probe sees) as a user reports it in words with no
    # exception at all: explain lists the entry as a candidate, never known (compat.harness.explain_prose).
    prose: Prose | None = None

    def __post_init__(self) -> None:
        if self.prose is not None and not (self.symptom.silent or self.probe == REFERENCE_PROBE):
            raise ValueError(f"breakage {self.id}: only a data fault (silent, or seen by the reference probe) is "
                             "reported in words")
        if self.user_symptom is not None and (self.user_symptom.silent or self.user_symptom.cases is not None):
            raise ValueError(f"breakage {self.id}: a user symptom is an exception a log shows, with no probe case")
        if self.symptom.context is not None:
            raise ValueError(f"breakage {self.id}: only a user symptom names a context (a probe's failure has none)")
        if self.probe is None:
            object.__setattr__(self, "probe", self.id)
        Version(self.introduced_in)
        if self.removed_in:
            Version(self.removed_in)
        SpecifierSet(self.affects)
        unknown = set(self.backends) - set(BACKENDS)
        if unknown:
            raise ValueError(f"breakage {self.id}: unknown backend(s) {sorted(unknown)}; expected some of {BACKENDS}")

    def explain(self, style: str = "one-line", seen: str = "") -> str:
        """This breakage as every output presents it (compat.shared.presentation.STYLES: one-line,
        text, markdown, html, junit, github); `seen` is the failure as observed, where there is room."""
        from compat.shared.presentation import explain_breakage  # markupsafe: only where a breakage is presented

        presented: str = explain_breakage(self, style, seen)  # markupsafe's Markup (a str) for html
        return presented

    @property
    def findings(self) -> str:
        """Where what was read or measured for this entry is written down (where it was observed, with the
        figures): its section of docs/findings.md. The entry itself holds no such prose."""
        return f"{FINDINGS}#{self.id}"

    def scope(self) -> str:
        until = f" up to {self.removed_in} (excluded)" if self.removed_in else ""
        on = ", ".join(self.backends) or "no backend (inferred, never observed)"
        return f"vLLM from {self.introduced_in}{until}, speculators {self.affects}, observed on {on}"

    def applies(self, vllm: str, speculators: str, backend: str = "cpu") -> bool:
        """Whether this (vLLM version, speculators version, backend) is expected to show it."""
        if backend not in self.backends:
            return False
        v = _version(vllm)
        s = _version(speculators)
        if v is None or s is None:
            return False
        # Compare on the release only, so 0.16.1.dev3+gabc counts as 0.16.1.
        release = Version(".".join(str(p) for p in v.release))
        if release < Version(self.introduced_in):
            return False
        if self.removed_in and release >= Version(self.removed_in):
            return False
        return _specifier(self.affects).contains(s, prereleases=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "introduced_in": self.introduced_in,
            "removed_in": self.removed_in,
            "affects": self.affects,
            "backends": list(self.backends),
            "symptom": {
                "exception": list(self.symptom.exception),
                "message": self.symptom.message,
                "where": self.symptom.where,
                "silent": self.symptom.silent,
                "cases": self.symptom.cases,
                "data": list(self.symptom.data),
                "description": self.symptom.description,
            },
            "fix": self.fix,
            "adapter": self.adapter,
            "references": list(self.references),
            "advisory": self.advisory,
            "probe": self.probe,
            "prevented_by": self.prevented_by,
            "intermittent": self.intermittent,
            "user_symptom": None if self.user_symptom is None else {
                "exception": list(self.user_symptom.exception), "message": self.user_symptom.message,
                "where": self.user_symptom.where, "context": self.user_symptom.context,
                "description": self.user_symptom.description,
                "notes": self.findings},
            "notes": self.findings,
        }


@lru_cache(maxsize=None)
def _version(text: str) -> Version | None:
    try:
        return Version(str(text).split("+", 1)[0])
    except InvalidVersion:
        return None


@lru_cache(maxsize=None)
def _specifier(text: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:  # pragma: no cover - checked in __post_init__
        raise ValueError(f"bad speculators specifier {text!r}") from exc
