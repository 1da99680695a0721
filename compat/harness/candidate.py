"""A candidate speculators build (`--speculators PATH`: a wheel file, or a source tree built into one)
run against released vLLM: named by its own version (read from the wheel's METADATA, e.g.
`0.9.1.dev0+gabc123`), its cells marked `candidate` in their ids (compat.harness.matrix.Cell), its row
written apart from the released rows (`results/support/candidate-speculators-V.json`) and never published.

The wheel is handled as `--vllm PATH.whl` is (compat.harness.matrix.wheel_version; the recipe installs
it from the file, the static layer reads its sources: compat.harness.static.sources.SourceCache.add_local).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

from packaging.version import Version

from compat.harness.matrix import CANDIDATE, SPECULATORS_DIST, MatrixError, wheel_version
from compat.shared.records import CellRecord

ACCEPTED = ("a speculators release (e.g. 0.9.0), a speculators wheel file (speculators-*.whl), or a speculators "
            "source tree (a folder with pyproject.toml or setup.py)")
BUILD_TIMEOUT = 900


def is_path(value: str) -> bool:
    """Whether `--speculators VALUE` names a file or folder rather than a version."""
    return Path(value).exists() or value.endswith(".whl") or "/" in value


def candidate_wheel(value: str, build_root: Path | None = None) -> tuple[str, str]:
    """(version, absolute wheel path) of `--speculators PATH`: the wheel itself, or the wheel built from a
    source tree (`uv build --wheel`, into `build_root`). MatrixError names the path and what is accepted."""
    path = Path(value)
    if path.is_dir():
        if not ((path / "pyproject.toml").is_file() or (path / "setup.py").is_file()):
            raise MatrixError(f"--speculators {value}: a folder with neither pyproject.toml nor setup.py, so no "
                              f"source tree; expected {ACCEPTED}")
        return _checked(str(build_tree(path, build_root)), value)
    if path.is_file() and path.name.endswith(".whl"):
        return _checked(value, value)
    what = "no such file or folder" if not path.exists() else "neither a wheel file (*.whl) nor a folder"
    raise MatrixError(f"--speculators {value}: {what}; expected {ACCEPTED}")


def _checked(wheel: str, given: str) -> tuple[str, str]:
    version, resolved = wheel_version(wheel, "--speculators", (SPECULATORS_DIST,))
    metadata = wheel_metadata(Path(resolved))
    if metadata.get("Version") and Version(metadata["Version"]) != Version(version):
        raise MatrixError(f"--speculators {given}: the wheel's name says {version}, its METADATA "
                          f"{metadata['Version']}; a candidate is named by one version")
    return version, resolved


def wheel_metadata(path: Path) -> dict[str, str]:
    """Name and Version from the wheel's *.dist-info/METADATA."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")),
                        None)
            if name is None:
                raise MatrixError(f"--speculators {path}: no *.dist-info/METADATA in the wheel")
            text = archive.read(name).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise MatrixError(f"--speculators {path}: cannot read the wheel ({exc}); expected {ACCEPTED}") from None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, rest = line.partition(":")
        if key in ("Name", "Version") and key not in fields:
            fields[key] = rest.strip()
    return fields


def build_tree(tree: Path, build_root: Path | None = None) -> Path:
    """The speculators wheel built from a source tree with `uv build --wheel` (its own build backend and
    version scheme: setuptools-git-versioning reads the tree's git tags or its version file)."""
    from compat.harness.cell_envs import uv_command
    from compat.harness.pypi import default_cache_dir

    tree = tree.resolve()
    root = build_root or Path(default_cache_dir()) / "candidates"
    out = root / hashlib.sha256(str(tree).encode()).hexdigest()[:16]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    print(f"[candidate] building the wheel of {tree} (uv build --wheel)", flush=True)
    try:
        done = subprocess.run([*uv_command(), "build", "--wheel", "--out-dir", str(out), str(tree)],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MatrixError(f"--speculators {tree}: the source tree could not be built: {exc}") from None
    wheels = sorted(out.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise MatrixError(f"--speculators {tree}: `uv build --wheel` exited {done.returncode} with "
                          f"{len(wheels)} wheel(s); its output ends:\n{tail}")
    return wheels[0]


def describe(wheel: str) -> dict[str, Any]:
    """What a record or a row says of the candidate: its wheel file and sha256."""
    path = Path(wheel)
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    return {"wheel": path.name, "path": str(path), "sha256": digest}


def is_candidate(record: CellRecord) -> bool:
    """Whether a cell record is a candidate build's (never a released row's): its `candidate`, or its id."""
    return record.candidate is not None or f"__{CANDIDATE}" in record.id


def row_name(version: str) -> str:
    """The candidate's row document name (results/support/<name>.json): apart from `speculators-V`."""
    return f"{CANDIDATE}-speculators-{version}"
