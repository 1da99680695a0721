"""Mutation testing of the verdict and classification code: how many mutants the unit tests let live.

    python bench/mutation.py --rev HEAD            # the code as it is
    python bench/mutation.py --rev 3448420 --before # the code before the one-verdict-rule change

Exports the revision with `git archive` into a scratch folder, configures mutmut (3.x) to mutate
only the verdict/classification modules, runs the unit tests that exercise them against every
mutant, and prints mutmut's per-status counts and the surviving mutants. Needs `mutmut` in the
running interpreter's environment (`uv pip install mutmut`). Takes 10-40 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AFTER = {"mutate": ["compat/harness/verdict.py", "compat/harness/classify.py", "compat/shared/breakages.py",
                    "compat/shared/breakage_model.py", "compat/harness/evidence.py", "compat/harness/causes.py"],
         "tests": ["tests/unit/test_verdict.py", "tests/unit/test_classify.py", "tests/unit/test_trap_corpus.py",
                   "tests/unit/test_explain.py", "tests/unit/test_evidence.py", "tests/unit/test_evidence_genuine.py",
                   "tests/unit/test_verdict_mutants.py", "tests/unit/test_evidence_redteam.py",
                   "tests/unit/test_gpu_causes.py"]}
# Before: the verdict rule lived in compat/shared/results.py (cell_verdict) and the gate in classify.exit_code.
BEFORE = {"mutate": ["compat/shared/results.py", "compat/harness/classify.py", "compat/shared/breakages.py"],
          "tests": ["tests/unit/test_classify.py", "tests/unit/test_report.py", "tests/unit/test_runner.py"]}


def config(spec: dict) -> str:
    quoted = lambda items: "[" + ", ".join(f'"{i}"' for i in items) + "]"  # noqa: E731
    return (f"\n[tool.mutmut]\nsource_paths = [\"compat\"]\nonly_mutate = {quoted(spec['mutate'])}\n"
            f"pytest_add_cli_args_test_selection = {quoted(spec['tests'])}\n"
            "pytest_add_cli_args = [\"-p\", \"no:cacheprovider\", \"-q\"]\n"
            # the registry's reference test reads docs/findings.md
            "also_copy = [\"docs\", \"reports\", \"tests/unit/corpus\", \"tests/unit/record_factory.py\"]\n")


# Functions that only build text or serialise (notes, reasons, labels, as_dict for the report's JSON):
# a mutant there changes wording, never a verdict, a class or the gate.
PRESENTATION = ("as_dict", "scope", "_label", "_why", "_got", "_new_note", "explain", "explain_breakage", "render",
                "_row")


def category(name: str, diff: str) -> str:
    """`presentation`, `text` (a string literal's wording or case inside a message), or `logic`."""
    function = name.rsplit(".", 1)[-1].split("__mutmut_")[0].lstrip("x_").split("ǁ")[-1]
    if function in PRESENTATION or function.lstrip("_") in (p.lstrip("_") for p in PRESENTATION):
        return "presentation"
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    if len(removed) == 1 and len(added) == 1:
        before, after = removed[0], added[0]
        if "XX" in after and after.replace("XX", "") == before:
            return "text"
        if after.lower() == before.lower() and after != before:
            return "text"
    return "logic"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--before", action="store_true", help="mutate the pre-change modules (results.cell_verdict)")
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--scratch", type=Path, default=None, help="report on an earlier run's scratch copy")
    args = parser.parse_args(argv)
    spec = BEFORE if args.before else AFTER
    mutmut = [sys.executable, "-c", "from mutmut.__main__ import cli; cli()"]
    work = args.scratch
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="mutation-"))
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
        with (work / "pyproject.toml").open("a") as handle:
            handle.write(config(spec))
        subprocess.run([*mutmut, "run", "--max-children", str(args.children)], cwd=work,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listed = subprocess.run([*mutmut, "results", "--all", "true"], cwd=work, capture_output=True, text=True).stdout
    statuses = collections.Counter()
    survivors = []
    for line in listed.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name:
            continue
        statuses[status] += 1
        if status == "survived":
            survivors.append(name)
    print(f"rev {args.rev} ({'before' if args.before else 'after'}): mutated {', '.join(spec['mutate'])}")
    print("mutants: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    kinds = collections.defaultdict(list)
    for name in survivors:
        diff = subprocess.run([*mutmut, "show", name], cwd=work, capture_output=True, text=True).stdout
        kinds[category(name, diff)].append((name, diff))
    print("survivors by kind: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(kinds.items())))
    for name, diff in kinds["logic"]:
        change = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        print(f"  logic: {name}: " + " => ".join(line.strip() for line in change[:2]))
    print(f"(scratch copy: {work}; `mutmut show NAME` there shows a mutant)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
