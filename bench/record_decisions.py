"""Every committed record's decision, kept and compared: a refactor of the loader or the verdict rule
must leave each one as it was.

    python bench/record_decisions.py snapshot OUT.json   # before the change (OUT outside the repository)
    python bench/record_decisions.py compare OUT.json    # after it: exit 1 and each difference shown

A record is every `*.json` and `*.json.gz` under published/ and reports/ that the report's loader
(compat.shared.results.load_cell) reads; what it does not read (a support row, a merged report) is kept
with its refusal. Each record is decided (compat.harness.verdict.decide): its verdict, its gate, the
reasons and each probe's class. A record whose file gained or lost `.gz` since is compared as itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat.harness.verdict import decide  # noqa: E402
from compat.shared.results import ResultFileError, load_cell  # noqa: E402

FOLDERS = ("published", "reports")


def _twin(name: str) -> str:
    """The same record compressed or not: `x.json` <-> `x.json.gz`."""
    return name[:-3] if name.endswith(".gz") else name + ".gz"


def decisions() -> dict[str, dict[str, Any]]:
    """Each committed record file (its path in the repository) -> its decision, or the loader's refusal."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*")
                       if p.name.endswith((".json", ".json.gz")) and p.is_file()):
        try:
            record = load_cell(path)
        except ResultFileError as exc:
            out[str(path.relative_to(ROOT))] = {"refused": str(exc).replace(str(ROOT) + "/", "")[:300]}
            continue
        decision = decide(record)
        out[str(path.relative_to(ROOT))] = {
            "verdict": str(decision.verdict), "gate": decision.gate, "reasons": list(decision.reasons),
            "classes": [[p.record.key, str(p.record.status), cls.kind] for p, cls in decision.probes]}
    return out


def differences(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    """One line per record decided before and after whose decision moved, and per record only one side has."""
    lines = []
    after = dict(after)
    for name in sorted(before):  # a record compressed (or uncompressed) since is compared as itself
        if name not in after and _twin(name) in after:
            after[name] = after.pop(_twin(name))
    for name in sorted(set(before) | set(after)):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if was is None or now is None:
            lines.append(f"{name}: {'new' if was is None else 'gone'}")
            continue
        moved = [key for key in ("refused", "verdict", "gate", "reasons", "classes") if was.get(key) != now.get(key)]
        lines.append(f"{name}: {', '.join(moved)} moved: "
                     + "; ".join(f"{key} {str(was.get(key))[:160]!r} -> {str(now.get(key))[:160]!r}" for key in moved))
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("snapshot", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    what, out = argv[0], Path(argv[1])
    now = decisions()
    decided = sum("verdict" in d for d in now.values())
    if what == "snapshot":
        out.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"{decided} records decided, {len(now) - decided} files refused: {out}")
        return 0
    lines = differences(json.loads(out.read_text()), now)
    print("\n".join(lines) or f"every record decides as in {out} ({decided} records)")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
