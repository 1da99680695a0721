"""Bisect's pieces: flips over a series, the ranges where a contract holds, the registry's
introduced_in/removed_in checked against the flips, and runtime confirmation from stored cells."""

from __future__ import annotations

import json

from compat.harness.static.check import Finding
from compat.harness.static.contract_history import (
    cell_results,
    confirm,
    flips,
    holds,
    holds_text,
    registry_check,
    registry_entries,
    support,
)
from compat.harness.static.uses import Use
from compat.shared.breakages import BY_ID

RELEASES = ["0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.16.0", "0.17.0", "0.18.0"]
USE = Use("call", "vllm.v1.request.Request", "speculators/gen.py", 12, keywords=("eos_token_id",))


def series(outcomes: str) -> dict[str, Finding]:
    """One letter a release: o ok, b broken, u unknown, - not read."""
    out = {}
    for release, letter in zip(RELEASES, outcomes):
        if letter != "-":
            outcome = {"o": "ok", "b": "broken", "u": "unknown"}[letter]
            out[release] = Finding(USE, outcome, "ok" if outcome == "ok"
                                   else "unexpected keyword argument 'eos_token_id'",
                                   f"vllm/v1/request.py:{RELEASES.index(release) + 1}")
    return out


def test_flips_and_ranges():
    points = series("ooooobb")
    assert [(f["before_release"], f["release"], f["turn"])
            for f in flips(points, RELEASES)] == [("0.16.0", "0.17.0", "breaks")]
    assert flips(points, RELEASES)[0]["line"].startswith(
        "vllm/v1/request.py:6: Request(eos_token_id=…): unexpected keyword argument 'eos_token_id': ")
    assert holds_text(holds(points, RELEASES), RELEASES) == "0.11.0 – 0.16.0"
    back = series("obbooob")
    assert [(f["release"], f["turn"]) for f in flips(back, RELEASES)] == [
        ("0.11.1", "breaks"), ("0.12.0", "holds again"), ("0.18.0", "breaks")]
    assert holds_text(holds(back, RELEASES), RELEASES) == "0.11.0, 0.12.0 – 0.17.0"
    assert holds_text(holds(series("ooooooo"), RELEASES), RELEASES) == "all (0.11.0 – 0.18.0)"
    assert support(holds(back, RELEASES), RELEASES) == [
        {"version_added": "0.11.0", "version_removed": "0.11.1"},
        {"version_added": "0.12.0", "version_removed": "0.18.0"}]
    assert support(holds(series("ooooooo"), RELEASES), RELEASES)[0]["version_removed"] is None


def test_unknown_or_unread_releases_make_no_flip():
    assert [f["release"] for f in flips(series("oou-obb"), RELEASES)] == ["0.17.0"]


def test_the_registry_is_checked_against_the_flips():
    entry = BY_ID["request_signature"]  # introduced_in 0.17.0, no removed_in
    assert registry_entries("0.3.0", "call", "vllm.v1.request.Request") == [entry]
    assert registry_entries("0.9.0", "call", "vllm.v1.request.Request") == []  # affects <0.5
    assert registry_check(entry, flips(series("ooooobb"), RELEASES), RELEASES)["agrees"]
    late = registry_check(entry, flips(series("oooobbb"), RELEASES), RELEASES)
    assert not late["agrees"] and "first broken in 0.16.0" in late["verdict"]
    healed = registry_check(entry, flips(series("ooooobo"), RELEASES), RELEASES)
    assert not healed["agrees"] and "holds again from 0.18.0" in healed["verdict"]
    server = BY_ID["extract_hidden_states_method"]  # introduced_in 0.1.0 (not read), removed_in 0.17.0
    assert registry_check(server, flips(series("bbbbboo"), RELEASES), RELEASES, starts_broken=True)["agrees"]
    never = registry_check(server, flips(series("bbbbbbb"), RELEASES), RELEASES, starts_broken=True)
    assert not never["agrees"] and "still broken in 0.18.0" in never["verdict"]


def _cell(tmp_path, vllm, status):
    record = {"id": f"vllm-{vllm}__speculators-0.3.0__cpu", "vllm": vllm, "speculators": "0.3.0", "backend": "cpu",
              "verdict": "error", "probes": [{"id": "request_signature", "status": status}]}
    (tmp_path / f"{record['id']}.json").write_text(json.dumps(record))


def test_a_flip_is_confirmed_only_by_stored_runtime_results(tmp_path):
    flip = flips(series("ooooobb"), RELEASES)[0]
    cpu = ["0.11.0", "0.16.0", "0.17.0"]
    missing = confirm(flip, "request_signature", "0.3.0", cpu, cell_results(tmp_path))
    assert not missing["confirmed"] and "--vllm 0.16.0 --vllm 0.17.0 --speculators 0.3.0" in missing["text"]
    _cell(tmp_path, "0.16.0", "ok")
    _cell(tmp_path, "0.17.0", "broken")
    assert confirm(flip, "request_signature", "0.3.0", cpu, cell_results(tmp_path))["confirmed"]
    _cell(tmp_path, "0.17.0", "error")  # an engine that did not start tells nothing either way
    undecided = confirm(flip, "request_signature", "0.3.0", cpu, cell_results(tmp_path))
    assert not undecided["confirmed"] and not undecided.get("disagrees") and "could not tell" in undecided["text"]
    _cell(tmp_path, "0.17.0", "ok")
    disagree = confirm(flip, "request_signature", "0.3.0", cpu, cell_results(tmp_path))
    assert disagree.get("disagrees") and not disagree["confirmed"]


def test_a_nearest_kernel_cell_confirms_no_flip_a_real_build_does(tmp_path):
    """A registry entry's release range rests on real builds: a nearest-kernel cell's finding (issue 46) is a lead."""
    from compat.harness import nearest_kernels as nk

    flip = flips(series("ooooobb"), RELEASES)[0]
    cpu = ["0.11.0", "0.16.0", "0.17.0"]
    _cell(tmp_path, "0.16.0", "ok")
    cell = nk.KernelCell("0.17.0", "0.3.0", "cpu", kernels="0.16.0")
    lead = {"id": cell.id, "vllm": "0.17.0", "speculators": "0.3.0", "backend": "cpu", "verdict": "error",
            "kernels": nk.kernels_record(cell), "probes": [{"id": "request_signature", "status": "broken"}]}
    (tmp_path / f"{cell.id}.json").write_text(json.dumps(lead))
    alone = confirm(flip, "request_signature", "0.3.0", cpu, cell_results(tmp_path))
    assert not alone["confirmed"] and "no stored request_signature result for vLLM 0.17.0" in alone["text"]
    _cell(tmp_path, "0.17.0", "ok")  # the real build of 0.17.0 decides
    assert confirm(flip, "request_signature", "0.3.0", cpu, cell_results(tmp_path)).get("disagrees")


def test_the_nearest_cpu_builds_stand_in_and_say_so(tmp_path):
    flip = flips(series("ooooobb"), RELEASES)[0]
    result = confirm(flip, "request_signature", "0.3.0", ["0.12.0", "0.18.0"], {})
    assert "0.12.0" in result["text"] and "0.18.0" in result["text"] and "nearest CPU builds" in result["text"]
    assert "static only" in confirm(flip, "request_signature", "0.3.0", ["0.18.0"], {})["text"]


def test_bisect_refuses_a_bad_version_bound_naming_it(capsys):
    from compat.harness.bisect_cli import main

    assert main(["--speculators", "0.3.0", "--since", "banana"]) == 64
    assert "--since 'banana' is not a version" in capsys.readouterr().err
