"""A small package-index client: releases, the wheel for a target, and the METADATA inside it.

`PackageIndex` talks to PyPI's JSON API with urllib and keeps everything under one cache
directory (project JSON, wheels, METADATA). `LocalIndex` serves the same three questions from a
dict of releases and a folder of wheel files, for tests and offline runs. Both satisfy `Index`.
"""

from __future__ import annotations

import email.message
import email.parser
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

PYPI_JSON = "https://pypi.org/pypi"
PROJECT_JSON_MAX_AGE = 3600.0  # seconds; releases appear over time, so project JSON goes stale


class PackageIndexError(LookupError):
    """A package, release or file the index does not have (the message says what it has)."""


class NoMatchingWheel(PackageIndexError):
    """The release exists but has no wheel for the requested python/platform."""


class Index(Protocol):
    def releases(self, name: str) -> list[str]: ...

    def wheel_for(
        self, name: str, version: str, python: str = "3.11", platform: str = "manylinux_x86_64"
    ) -> Path: ...

    def wheel_metadata(
        self, name: str, version: str, python: str = "3.11", platform: str = "manylinux_x86_64"
    ) -> email.message.Message: ...


def default_cache_dir() -> Path:
    return Path(os.environ.get("COMPAT_CACHE_DIR") or Path.home() / ".cache" / "vllm-spec-compat")


def sort_versions(versions: list[str]) -> list[str]:
    """Sorted by PEP 440 order; strings that are not versions are dropped."""
    parsed = []
    for text in versions:
        try:
            parsed.append((Version(text), text))
        except InvalidVersion:
            continue
    return [text for _, text in sorted(parsed)]


def target_tags(python: str, platform: str) -> list[Tag]:
    """Wheel tags a CPython `python` (e.g. "3.11") on `platform` accepts, most preferred first.

    `platform` is "manylinux_<arch>": any manylinux glibc level for that arch is accepted.
    """
    family, _, arch = platform.partition("_")
    if family != "manylinux" or not arch:
        raise ValueError(f"platform {platform!r}: expected 'manylinux_<arch>', e.g. 'manylinux_x86_64'")
    major, minor = (int(part) for part in python.split(".")[:2])
    platforms = [f"manylinux_2_{glibc}_{arch}" for glibc in range(40, 4, -1)]
    platforms += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}", f"linux_{arch}"]
    interpreter = f"cp{major}{minor}"
    tags = list(cpython_tags((major, minor), abis=[interpreter], platforms=platforms))
    tags += list(compatible_tags((major, minor), interpreter=interpreter, platforms=platforms))
    return tags


def best_wheel(filenames: list[str], python: str, platform: str) -> str | None:
    """The filename among `filenames` whose tags rank best for the target, or None."""
    rank = {tag: position for position, tag in enumerate(target_tags(python, platform))}
    best: tuple[int, str] | None = None
    for filename in filenames:
        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        positions = [rank[tag] for tag in tags if tag in rank]
        if positions and (best is None or min(positions) < best[0]):
            best = (min(positions), filename)
    return best[1] if best else None


def parse_metadata(text: str) -> email.message.Message:
    return email.parser.Parser().parsestr(text)


def read_metadata_from_zip(archive: zipfile.ZipFile, where: str) -> str:
    """The text of the single top-level *.dist-info/METADATA in a wheel."""
    names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(names) != 1:
        raise PackageIndexError(f"{where}: expected one *.dist-info/METADATA, found {names or 'none'}")
    return archive.read(names[0]).decode("utf-8")


def _no_release_message(name: str, version: str, releases: list[str]) -> str:
    shown = ", ".join(releases[-12:]) if releases else "none"
    return f"{name} has no release {version}; its releases end with: {shown}"


def _no_wheel_message(name: str, version: str, python: str, platform: str, files: list[str]) -> str:
    return (
        f"{name} {version} has no wheel for python {python} on {platform}; "
        f"its files are: {', '.join(sorted(files)) or 'none'}"
    )


class LocalIndex:
    """`Index` served from memory: {name: [versions]} plus a folder of wheel files."""

    def __init__(self, releases: dict[str, list[str]], wheels_dir: Path):
        self._releases = {canonicalize_name(k): list(v) for k, v in releases.items()}
        self._wheels_dir = Path(wheels_dir)

    def releases(self, name: str) -> list[str]:
        try:
            return sort_versions(self._releases[canonicalize_name(name)])
        except KeyError:
            raise PackageIndexError(f"no package {name!r} in the local index") from None

    def _files(self, name: str, version: str) -> list[str]:
        if version not in self.releases(name):
            raise PackageIndexError(_no_release_message(name, version, self.releases(name)))
        found = []
        for path in self._wheels_dir.glob("*.whl"):
            wheel_name, wheel_version, _, _ = parse_wheel_filename(path.name)
            if wheel_name == canonicalize_name(name) and wheel_version == Version(version):
                found.append(path.name)
        return found

    def wheel_for(self, name: str, version: str, python: str = "3.11", platform: str = "manylinux_x86_64") -> Path:
        files = self._files(name, version)
        chosen = best_wheel(files, python, platform)
        if chosen is None:
            raise NoMatchingWheel(_no_wheel_message(name, version, python, platform, files))
        return self._wheels_dir / chosen

    def wheel_metadata(self, name: str, version: str, python: str = "3.11",
                       platform: str = "manylinux_x86_64") -> email.message.Message:
        path = self.wheel_for(name, version, python, platform)
        with zipfile.ZipFile(path) as archive:
            return parse_metadata(read_metadata_from_zip(archive, str(path)))


Opener = Callable[[urllib.request.Request], Any]


class PackageIndex:
    """`Index` backed by a PyPI-style JSON API, with an on-disk cache."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        base_url: str = PYPI_JSON,
        opener: Opener | None = None,
        max_age: float = PROJECT_JSON_MAX_AGE,
    ):
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.base_url = base_url.rstrip("/")
        self._open = opener or (lambda request: urllib.request.urlopen(request, timeout=60))
        self.max_age = max_age

    # -- project JSON -------------------------------------------------------------------
    def _project_url(self, name: str) -> str:
        return f"{self.base_url}/{canonicalize_name(name)}/json"

    def project(self, name: str) -> dict[str, Any]:
        """The project's JSON document; a cached copy younger than max_age, else a fresh one."""
        path = self.cache_dir / "json" / f"{canonicalize_name(name)}.json"
        if path.exists() and time.time() - path.stat().st_mtime < self.max_age:
            cached: dict[str, Any] = json.loads(path.read_text())
            return cached
        url = self._project_url(name)
        try:
            with self._open(urllib.request.Request(url, headers={"Accept": "application/json"})) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise PackageIndexError(f"the index has no package {name!r} ({url} answered 404)") from None
            return self._stale_or_raise(path, name, exc)
        except OSError as exc:
            return self._stale_or_raise(path, name, exc)
        _write_atomic(path, body)
        fresh: dict[str, Any] = json.loads(body)
        return fresh

    @staticmethod
    def _stale_or_raise(path: Path, name: str, exc: Exception) -> dict[str, Any]:
        if path.exists():  # offline: an old answer beats none
            stale: dict[str, Any] = json.loads(path.read_text())
            return stale
        raise PackageIndexError(f"cannot reach the index for {name!r}: {exc}") from exc

    def _release_files(self, name: str, version: str) -> list[dict[str, Any]]:
        releases = self.project(name).get("releases", {})
        files = [f for f in releases.get(version, []) if not f.get("yanked")]
        if not files:
            raise PackageIndexError(_no_release_message(name, version, self.releases(name)))
        return files

    def releases(self, name: str) -> list[str]:
        """Versions with at least one file that is not yanked, in PEP 440 order."""
        releases = self.project(name).get("releases", {})
        return sort_versions([v for v, files in releases.items() if any(not f.get("yanked") for f in files)])

    # -- wheels -------------------------------------------------------------------------
    def _choose_file(self, name: str, version: str, python: str, platform: str) -> dict[str, Any]:
        files = self._release_files(name, version)
        chosen = best_wheel([f["filename"] for f in files], python, platform)
        if chosen is None:
            raise NoMatchingWheel(_no_wheel_message(name, version, python, platform, [f["filename"] for f in files]))
        return next(f for f in files if f["filename"] == chosen)

    def _file_url(self, name: str, info: dict[str, Any]) -> str:
        # PyPI's JSON may give file URLs relative to the JSON document.
        return urllib.parse.urljoin(self._project_url(name), str(info["url"]))

    def wheel_for(self, name: str, version: str, python: str = "3.11", platform: str = "manylinux_x86_64") -> Path:
        info = self._choose_file(name, version, python, platform)
        path: Path = self.cache_dir / "wheels" / info["filename"]
        expected = info.get("digests", {}).get("sha256")
        if path.exists() and (not expected or _sha256(path) == expected):
            return path
        url = self._file_url(name, info)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out, self._open(urllib.request.Request(url)) as response:
                shutil.copyfileobj(response, out, 1 << 20)
            actual = _sha256(Path(tmp))
            if expected and actual != expected:
                raise PackageIndexError(
                    f"{info['filename']} from {url} has sha256 {actual}, the index says {expected}"
                )
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def wheel_metadata(self, name: str, version: str, python: str = "3.11",
                       platform: str = "manylinux_x86_64") -> email.message.Message:
        """METADATA of the wheel `wheel_for` would pick, read without downloading it when possible."""
        info = self._choose_file(name, version, python, platform)
        cached = self.cache_dir / "metadata" / f"{info['filename']}.METADATA"
        if cached.exists():
            return parse_metadata(cached.read_text())
        wheel = self.cache_dir / "wheels" / info["filename"]
        text = None if wheel.exists() else self._remote_metadata(name, info)
        if text is None:
            wheel = self.wheel_for(name, version, python, platform)
            with zipfile.ZipFile(wheel) as archive:
                text = read_metadata_from_zip(archive, str(wheel))
        _write_atomic(cached, text.encode("utf-8"))
        return parse_metadata(text)

    def _remote_metadata(self, name: str, info: dict[str, Any]) -> str | None:
        """METADATA via HTTP range reads of the remote zip (wheels run to hundreds of MB); None if
        the server does not serve ranges."""
        size = info.get("size")
        if not size:
            return None
        try:
            remote = io.BufferedReader(_RangeReader(self._file_url(name, info), size, self._open), 1 << 18)
            with zipfile.ZipFile(remote) as archive:
                return read_metadata_from_zip(archive, info["filename"])
        except (_NoRanges, OSError, ValueError, zipfile.BadZipFile):
            return None


class _NoRanges(Exception):
    pass


class _RangeReader(io.RawIOBase):
    """A seekable read-only view of a remote file, one HTTP Range request per read."""

    def __init__(self, url: str, size: int, opener: Opener):
        self._url, self._size, self._open, self._pos = url, size, opener, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:  # a writable buffer (BufferedReader passes a memoryview)
        end = min(self._pos + len(buffer), self._size)
        if end <= self._pos:
            return 0
        request = urllib.request.Request(self._url, headers={"Range": f"bytes={self._pos}-{end - 1}"})
        with self._open(request) as response:
            if getattr(response, "status", None) != 206:
                raise _NoRanges(self._url)
            data = response.read()
        if len(data) > len(buffer):
            raise _NoRanges(self._url)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class WheelOverlay:
    """An `Index` that answers for one local wheel file (--vllm PATH.whl) and asks `base` the rest."""

    def __init__(self, base: Index | None, wheel: Path):
        self.base, self.wheel = base, Path(wheel)
        name, version, _, _ = parse_wheel_filename(self.wheel.name)
        self.name, self.version = name, version

    def _base(self, name: str) -> Index:
        if self.base is None:
            raise PackageIndexError(f"no index to ask for {name}: only the local wheel {self.wheel.name}")
        return self.base

    def _mine(self, name: str, version: str) -> bool:
        return canonicalize_name(name) == self.name and Version(version) == self.version

    def releases(self, name: str) -> list[str]:
        releases = self.base.releases(name) if self.base is not None else []
        return sort_versions(releases + [str(self.version)]) if canonicalize_name(name) == self.name else releases

    def wheel_for(self, name: str, version: str, python: str = "3.11", platform: str = "manylinux_x86_64") -> Path:
        if not self._mine(name, version):
            return self._base(name).wheel_for(name, version, python, platform)
        if best_wheel([self.wheel.name], python, platform) is None:
            raise NoMatchingWheel(_no_wheel_message(name, version, python, platform, [self.wheel.name]))
        return self.wheel

    def wheel_metadata(self, name: str, version: str, python: str = "3.11",
                       platform: str = "manylinux_x86_64") -> email.message.Message:
        if not self._mine(name, version):
            return self._base(name).wheel_metadata(name, version, python, platform)
        path = self.wheel_for(name, version, python, platform)
        with zipfile.ZipFile(path) as archive:
            return parse_metadata(read_metadata_from_zip(archive, str(path)))
