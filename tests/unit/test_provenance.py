"""The harness commit a record names comes from the harness's own source tree (compat.harness.store.
harness_commit): a checkout's HEAD (+dirty), a `git archive` copy's stamped commit, else `unknown`, and
never the HEAD of a repository the copy happens to sit in."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from compat.harness.store import HARNESS_ROOT, harness_commit

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="git is not installed")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def committed_repo(root: Path, name: str, text: str) -> str:
    """A new repository at `root` with one file committed; its HEAD."""
    root.mkdir(parents=True)
    git(root, "init", "-q")
    (root / name).write_text(text)
    git(root, "add", name)
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return git(root, "rev-parse", "HEAD")


def enclosing_repo(tmp_path: Path) -> tuple[Path, str]:
    outer = tmp_path / "project"
    return outer, committed_repo(outer, "notes.txt", "someone else's project\n")


def test_a_checkout_names_its_own_head():
    head = git(HARNESS_ROOT, "rev-parse", "HEAD")
    assert harness_commit().split("+")[0] == head


def test_a_git_archive_inside_another_repository_names_the_archived_commit(tmp_path):
    outer, outer_head = enclosing_repo(tmp_path)
    tarball = tmp_path / "harness.tar"
    subprocess.run(["git", "-C", str(HARNESS_ROOT), "archive", "-o", str(tarball), "HEAD"], check=True)
    copy = outer / "vendor" / "harness"
    copy.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(copy)
    said = harness_commit(copy, copy / "compat" / "commit.txt")
    assert outer_head not in said
    assert said == f"{git(HARNESS_ROOT, 'rev-parse', 'HEAD')} (archive: dirty unknown)"


def test_an_unstamped_copy_inside_another_repository_is_unknown_not_the_enclosing_head(tmp_path):
    outer, outer_head = enclosing_repo(tmp_path)
    copy = outer / "site-packages"
    (copy / "compat").mkdir(parents=True)
    (copy / "compat" / "commit.txt").write_text("$Format:%H$\n")  # a wheel or sdist: never substituted
    said = harness_commit(copy, copy / "compat" / "commit.txt")
    assert said.startswith("unknown (") and outer_head not in said and str(outer.resolve()) in said


def test_a_checkout_with_uncommitted_changes_says_dirty(tmp_path):
    repo = tmp_path / "harness"
    head = committed_repo(repo, "a.py", "x = 1\n")
    assert harness_commit(repo, repo / "none.txt") == head
    (repo / "a.py").write_text("x = 2\n")
    assert harness_commit(repo, repo / "none.txt") == head + "+dirty"
