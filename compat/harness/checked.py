"""A probe as its evidence reads: the record's probe with its status, with-compat status, cause and reason as
decided (compat.harness.evidence.recheck, compat.harness.causes), and what the record stated where that was set
aside. Its own type, not the record's JSON with keys added."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from compat.shared.records import Cause, ProbeRecord, ProbeStatus, build, to_json


@dataclass(frozen=True)
class Stated:
    """What a record said of a probe where its evidence, its cause or its environment set that aside."""
    status: ProbeStatus
    with_compat: Optional[ProbeStatus]


@dataclass(frozen=True)
class CheckedProbe:
    """A probe as its evidence reads (compat.harness.evidence.recheck, compat.harness.causes): the record with its
    status, with-compat status, cause and reason as decided, and what the record stated where that was set aside."""
    record: ProbeRecord
    stated: Optional[Stated] = None

    @property
    def label(self) -> str:
        return self.record.key

    @property
    def why(self) -> str:
        return str(self.record.reason or (self.record.error.message if self.record.error else "")
                   or "no reason recorded").splitlines()[0][:200]

    @property
    def with_compat_set_aside(self) -> bool:
        """Its with-compat run reads `error` because what it stated was set aside: no answer about the adapters."""
        return self.record.with_compat is ProbeStatus.ERROR and self.stated is not None

    def set_aside(self, status: ProbeStatus, with_compat: Optional[ProbeStatus], reason: str,
                  cause: Optional[Cause] = None) -> CheckedProbe:
        """This probe read otherwise (its status, with-compat status, reason and, where given, cause), what the
        record it was read from stated kept."""
        changes: dict[str, Any] = {"status": status, "with_compat": with_compat, "reason": reason}
        if cause is not None:
            changes["cause"] = cause
        return CheckedProbe(revised(self.record, **changes),
                            Stated(self.record.status, self.record.with_compat))

    def as_json(self) -> dict[str, Any]:
        """The probe as the JSON of the re-checked record (records.to_json, with `stated` where it was set aside)."""
        out: dict[str, Any] = to_json(self.record)
        if self.stated is not None:
            out["stated"] = to_json(self.stated)
        return out


def revised(probe: ProbeRecord, **changes: Any) -> ProbeRecord:
    """dataclasses.replace that keeps what the probe's JSON held (records.held): the fields changed are held too,
    null included, so records.to_json writes them as the record's JSON did plus the changes."""
    revised_probe: ProbeRecord = build(ProbeRecord, {**to_json(probe), **{k: to_json(v) for k, v in changes.items()}})
    return revised_probe
