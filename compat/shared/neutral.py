"""Text from a log or a record made neutral for a reader: control and bidirectional characters shown as escapes.

A record, a log line or an exception message is input like any other. A right-to-left override
(U+202E) in an exception message makes a browser, an editor or a terminal show the text after it
reversed; a carriage return or an escape sequence rewrites what a terminal shows. `neutral` writes
each such character as a visible escape (`\\u202e`, `\\x1b`, `\\r`) and leaves every other
character as it is. It is the one home of the rule: the Markdown escape (compat.shared.markdown),
the HTML and Markdown documents and the JUnit text (compat.harness.report.render, compat.harness.junit)
and the terminal of each command (`neutral_terminal`, the decorator of the harness `main` that each
`python -m compat...` entry point forwards to) call it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

# The Unicode bidirectional controls (embeddings, overrides, isolates, marks): each can reorder
# what is shown after it.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
# C0 and C1 control characters and DEL.
CONTROLS = "".join(chr(c) for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)))
_SHORT = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\x1b": "\\x1b"}


def _visible(char: str) -> str:
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(keep: str) -> re.Pattern[str]:
    found = _PATTERNS.get(keep)
    if found is None:
        chars = "".join(c for c in CONTROLS + BIDI_CONTROLS if c not in keep)
        found = _PATTERNS[keep] = re.compile("[" + re.escape(chars) + "]")
    return found


def neutral(text: Any, keep: str = "\n\t") -> str:
    """`text` (None as "") with every control and bidirectional character but those in `keep` written
    as a visible escape: U+202E -> `\\u202e`, ESC -> `\\x1b`, CR -> `\\r`. Every other character is
    kept, so text without them comes back unchanged."""
    s = "" if text is None else str(text)
    return _pattern(keep).sub(lambda m: _visible(m[0]), s)


class _NeutralStream:
    """A text stream that writes `neutral(text)` (newlines and tabs kept) to the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(neutral(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer...
        return getattr(self._stream, name)


@contextmanager
def neutral_terminal() -> Iterator[None]:
    """While inside: what the program prints to stdout and stderr is neutral, newlines and tabs kept (the
    terminal of a command: `@neutral_terminal()` decorates the `main` of `python -m compat`,
    `compat.report_cli`, `compat.explain` and `compat.bisect`). What a child process writes to the same
    terminal does not pass through it."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _NeutralStream(out), _NeutralStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
