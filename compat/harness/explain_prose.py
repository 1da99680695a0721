"""A report in words with no exception at all: which silent (data) faults of the registry it describes.

An issue can say what came back wrong without any error: "with prefix caching enabled, the hidden-state rows
do not correspond to the token ids; vLLM 0.22.0" (vllm#44485). A registry entry whose fault is in the data
(a silent symptom, or one the reference probe sees) says in its `prose` (compat.shared.breakages.Prose) when
the fault shows, in a user's words; `DATA_WORDS` here says how a user writes each data symptom. An entry is
described when the text shows its situation and one of its data symptoms, and it is then listed as a
*candidate* only, never known: words are no evidence that this fault, and not another, is what happened.
One that the text's versions rule out is named as such; one observed only on another backend than the
paste's keeps that caveat. explain exits 2 on such a paste as on any without an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compat.harness.paste_setting import Setting, backend_caveat, scope_check
from compat.shared.breakages import REGISTRY, Breakage

_HS = r"hidden[-_ ]?states?"
_NOT = r"(?:do(?:es)?|did|will|would|could)? ?(?:n[o']?t|never) (?:match|correspond|line up|align|agree)"
# A user's words for each data symptom an entry's prose names (compat.shared.breakages.DATA_SYMPTOMS).
DATA_WORDS: dict[str, str] = {
    "rows_missing": (rf"{_HS}\b[^.\n]{{0,80}}?"
                     rf"(?:inconsistent|{_NOT}|mismatch|fewer|shorter|missing|truncated|cut short)"
                     rf"|(?:fewer|missing|truncated|short) (?:rows|tokens|{_HS})"
                     r"|rows? (?:are |were )?(?:missing|short|lost|dropped)"),
    "values_wrong": (rf"(?:wrong|incorrect|garbage|corrupt(?:ed)?) (?:values|{_HS}|activations)"
                     rf"|{_HS}\b[^.\n]{{0,80}}?(?:are wrong|are incorrect|differ from|{_NOT} (?:the )?"
                     r"(?:reference|hf|transformers))"),
    "sequences_reordered": (r"(?:wrong|different|shuffled|mixed[- ]up|swapped) order|out of order|reorder"
                            r"|(?:belong|correspond)s? to (?:another|a different|the wrong) "
                            r"(?:prompt|request|sequence)"),
}


_WORD_TAIL = re.compile(r"[\w-]*")


@dataclass
class Described:
    entry: Breakage
    words: list[tuple[str, int]]  # the words that describe it (its situation, its data), with their line
    why_not: str | None = None  # the text's versions rule it out
    caveat: str | None = None  # observed on another backend than the paste's


def _found(pattern: str, text: str) -> tuple[str, int] | None:
    """The words that fit (to the end of the last word), with their line."""
    m = re.search(pattern, text, re.IGNORECASE)
    if not m:
        return None
    tail = _WORD_TAIL.match(text, m.end())
    end = tail.end() if tail else m.end()
    return " ".join(text[m.start():end].split()), text.count("\n", 0, m.start()) + 1


def described_faults(text: str, setting: Setting, registry: tuple[Breakage, ...] = REGISTRY) -> list[Described]:
    """Each registry entry with a `prose` whose situation and one of whose data symptoms the text shows,
    scoped by the setting (compat.harness.paste_setting.Setting): `why_not` where its versions rule it out,
    `caveat` where it was observed on other backends only."""
    out = []
    for entry in registry:
        if entry.prose is None:
            continue
        situation = _found(entry.prose.situation, text)
        data = next((hit for d in entry.prose.data if d in DATA_WORDS for hit in [_found(DATA_WORDS[d], text)] if hit),
                    None)
        if situation and data:
            out.append(Described(entry, [situation, data], scope_check(entry, setting), backend_caveat(entry, setting)))
    return out
