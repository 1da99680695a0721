"""The issue bot's comment: explain run on a new issue's title and body, written as Markdown.

    python -m compat.harness.issue_comment EVENT_JSON COMMENT_MD

EVENT_JSON is the GitHub `issues` event payload (`$GITHUB_EVENT_PATH` in .github/workflows/explain-issue.yml).
COMMENT_MD is written only when the issue's text holds an exception: a known breakage (the entry, where it
applies, the fix, references) or an honest "no known breakage matches" (with any match outside the versions
the issue states); an issue with no exception gets no comment, so the file is not written. The workflow
only calls this and posts the file with `gh issue comment`; the issue's text never reaches a shell.

Exit status: 0 when the event was read (comment written or not needed), 2 when the event file cannot be
read or is not an `issues` event (why on standard error).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

from compat.harness.explain import Explanation, Versions, exit_status, explain_paste

MARKER = "<!-- vllm-spec-compat: explain -->"


class EventError(ValueError):
    """The event file is not a readable `issues` event."""


def issue_text(event: dict[str, Any]) -> str:
    """The paste explain reads: the issue's title as a heading, then its body (GitHub sends null for none)."""
    issue = event.get("issue")
    if not isinstance(issue, dict) or "title" not in issue:
        raise EventError("no 'issue' object with a 'title'; expected the payload of an 'issues' event "
                         "(on: issues, types: [opened])")
    return f"# {issue.get('title') or ''}\n\n{issue.get('body') or ''}"


def _quote(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def _head(ex: Explanation) -> str:
    f = ex.found
    first = (f.message.splitlines() or [""])[0][:200]
    return f"{f.type}: {first}" if first else f.type


def comment(explanations: list[Explanation], versions: Versions) -> str | None:
    """The comment's Markdown, or None when the issue holds no exception."""
    if not explanations:
        return None
    known = [ex for ex in explanations if ex.known]
    lines = [MARKER]
    if known:
        lines.append("**Known breakage.** This looks like a failure `vllm-spec-compat` knows:")
    else:
        lines.append("**No known breakage matches** the error(s) in this issue, so this may be new.")
    lines.append("")
    for ex in explanations:
        place = ex.found.where or "no vLLM frame"
        lines.append(f"- {_quote(_head(ex))} (at {_quote(place)})")
        for entry in ex.matches:
            lines.append(f"  - **`{entry.id}`**: {entry.title}")
            lines.append(f"    - applies to {entry.scope()}")
            lines.append(f"    - fix: {entry.fix}")
            if entry.references:
                lines.append(f"    - see: {', '.join(entry.references)}")
        for entry, why in ex.out_of_range:
            lines.append(f"  - matches `{entry.id}` ({entry.title}), {why}: not counted as known")
        for entry, why in ex.candidates:
            lines.append(f"  - candidate `{entry.id}` ({entry.title}): its symptom fits, but it was {why}: "
                         "not counted as known")
        if not ex.matches:
            lines.append("  - relays another failure (see the root cause)" if ex.found.wrapper
                         else "  - no known breakage matches")
    lines += ["", f"Versions read from the issue: {versions.describe()}.",
              "", f"<sub>`nox -s explain` on this issue's text (exit {exit_status(explanations)}); "
                  "run it on your full log with `--vllm`/`--speculators` for a scoped answer.</sub>", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m compat.harness.issue_comment EVENT_JSON COMMENT_MD", file=sys.stderr)
        return 2
    event_path, comment_path = Path(args[0]), Path(args[1])
    try:
        event = json.loads(event_path.read_text(encoding="utf-8"))
        if not isinstance(event, dict):
            raise EventError("a JSON object is expected")
        text = issue_text(event)
    except (OSError, ValueError) as exc:
        print(f"issue_comment: cannot use {event_path}: {exc}; expected the JSON payload of a GitHub "
              "'issues' event ($GITHUB_EVENT_PATH)", file=sys.stderr)
        return 2
    body = comment(*explain_paste(text))
    if body is None:
        print(f"issue_comment: no exception in issue #{event['issue'].get('number')}: no comment")
        return 0
    comment_path.write_text(body, encoding="utf-8")
    print(f"issue_comment: comment for issue #{event['issue'].get('number')} written to {comment_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
