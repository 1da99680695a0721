"""Markdown made safe: text from logs and registry entries, escaped for a paragraph, a table cell or a code span.

The Markdown report (compat.harness.report) and a breakage's `explain("markdown")`
(compat.shared.breakages) both use it.
"""

from __future__ import annotations

import re
from typing import Any

from compat.shared.neutral import neutral

_MD_SPECIAL = re.compile(r"[\\`*_\[\]<>&|~$#!]")
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


class Md(str):
    """Markdown that `md` or `mdcode` made safe; _md_finalize leaves it as it is."""


def _md_line(text: Any, limit: int | None) -> str:
    """One line: whitespace runs (newlines too) one space, control and bidirectional characters as visible
    escapes (compat.shared.neutral), at most limit long."""
    s = neutral(" ".join(str(text if text is not None else "").split()))
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


def md_escape(text: Any, limit: int | None = 240) -> Md:
    """Plain text in a paragraph, list item or table cell: `&`, `<`, `>` as entities (no HTML, no
    autolink), and every other character Markdown gives a meaning to (emphasis, code spans, links and
    images, table cells, strikethrough, math, headings) behind a backslash."""
    return Md(_MD_SPECIAL.sub(lambda m: _MD_ENTITIES.get(m[0], "\\" + m[0]), _md_line(text, limit)))


def md_code(text: Any, limit: int = 160) -> Md:
    """A code span: its fence is one backtick longer than the longest run of backticks inside, so the
    text cannot close it (and HTML in a code span is text); `|` is escaped for a table cell."""
    s = _md_line(text, limit)
    if not s:
        return Md("")
    fence = "`" * (max((len(run) for run in re.findall("`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return Md(fence + pad + s.replace("|", "\\|") + pad + fence)
