"""One finding of the static layer: a use of vLLM by a speculators release, and what this vLLM
release says of it (check.py makes them, serve.py and bisect.py read them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compat.harness.static.uses import Use


@dataclass(frozen=True)
class Finding:
    use: Use
    outcome: str  # ok, broken, guarded, unknown, own-method
    what: str  # what is wrong (or "ok")
    vllm_where: str = ""  # vLLM file:line of the object (or of the module that lacks it)
    signature: str = ""  # the callee's signature in this release
    moved_to: tuple[str, ...] = ()

    @property
    def obj(self) -> str:
        return self.use.call_text() if self.use.kind in ("call", "method") else self.use.target

    def line(self) -> str:
        where = f"{self.vllm_where}: " if self.vllm_where else ""
        sig = f"; now {self.signature}" if self.signature and self.outcome == "broken" else ""
        moved = f"; defined now at {', '.join(self.moved_to)}" if self.moved_to else ""
        return f"{where}{self.obj}: {self.what}{sig}{moved} (used at {self.use.site})"

    def as_dict(self) -> dict[str, Any]:
        return {"contract": self.use.id, "kind": self.use.kind, "target": self.use.target,
                "dist": self.use.dist, "site": self.use.site, "outcome": self.outcome, "what": self.what,
                "vllm_where": self.vllm_where, "signature": self.signature, "moved_to": list(self.moved_to),
                "line": self.line()}
