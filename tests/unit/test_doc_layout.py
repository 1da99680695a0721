"""docs/architecture.md's layout, file by file, is the one tests/unit/doc_layout.py generates from the modules'
docstrings: a module added, removed or renamed, or a summary changed, fails here until the page is regenerated
(`python tests/unit/doc_layout.py --write`)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

import doc_layout
from doc_layout import COMMAND, PAGE, ROOT, current, layout, missing_docstrings, summary


def test_every_module_has_a_docstring():
    missing = missing_docstrings()
    assert not missing, f"modules with no docstring: {missing}; give each a one-line summary, then run `{COMMAND}`"


def test_the_layout_section_is_the_generated_one():
    page = PAGE.read_text(encoding="utf-8")
    held = current(page)
    assert held is not None, f"{PAGE.relative_to(ROOT)} lost its generated layout block: {doc_layout.BEGIN}"
    wanted = layout()
    diff = "\n".join(difflib.unified_diff(held.splitlines(), wanted.splitlines(), "the page", "the modules",
                                          lineterm="", n=0))
    assert held == wanted, f"{PAGE.relative_to(ROOT)}'s layout is stale: run `{COMMAND}`\n{diff}"


@pytest.mark.parametrize("docstring, first", [
    ("One line.", "One line."),
    ("A summary that wraps\nover two lines. Then more.\n\nA second paragraph.", "A summary that wraps over two lines."),
    ("Entry point for `python -m compat.bisect`; the code is compat.harness.bisect_cli.",
     "Entry point for `python -m compat.bisect`; the code is compat.harness.bisect_cli."),
    ("Reads the wheels (e.g. vllm 0.11. or 0.12.) and stops. Here.",
     "Reads the wheels (e.g. vllm 0.11. or 0.12.) and stops."),
    ("Which one? This one.", "Which one?"),
    ("No period at all", "No period at all"),
])
def test_the_summary_is_the_first_sentence(docstring, first):
    assert summary(docstring) == first


def _tree(root: Path, modules: dict[str, str]) -> Path:
    for name, text in {"noxfile.py": '"""Sessions."""\n', **modules}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_layout_follows_a_module_added_renamed_or_resummarised(tmp_path):
    tree = {"compat/__init__.py": '"""The package."""\n', "compat/shared/__init__.py": '"""Pure pieces."""\n',
            "compat/shared/a.py": '"""A does a. More."""\n'}
    before = layout(_tree(tmp_path / "one", tree))
    assert "- `compat/shared/a.py`: A does a.\n" in before and "**`compat/shared/`**: Pure pieces." in before
    assert layout(_tree(tmp_path / "two", {**tree, "compat/shared/b.py": '"""B."""\n'})) != before
    assert layout(_tree(tmp_path / "three", {**tree, "compat/shared/a.py": '"""A does more."""\n'})) != before
    renamed = {k.replace("a.py", "c.py"): v for k, v in tree.items()}
    assert layout(_tree(tmp_path / "four", renamed)) != before
    assert missing_docstrings(_tree(tmp_path / "five", {**tree, "compat/shared/d.py": "x = 1\n"})) == [
        "compat/shared/d.py"]


def test_the_layout_escapes_what_markdown_would_swallow(tmp_path):
    root = _tree(tmp_path, {"compat/x.py": '"""Writes reports/junit/<cell-id>.xml, not `<kept>`."""\n'})
    assert r"reports/junit/\<cell-id>.xml, not `<kept>`." in layout(root)
