"""A wheel's Python sources and metadata, fetched once into a cache.

A vLLM wheel is 300-450 MB, almost all of it compiled code; its .py members are ~13 MB. The
remote zip is read with HTTP range requests: its central directory (the tail of the file), then
the .py members' byte runs, neighbours merged into one request. The members kept (every `*.py`,
the dist-info's METADATA and entry_points.txt) are stored in a small zip under
`<cache>/static/sources/`, with the central directory's CRC-32 and size of *every* member of the
original wheel (what `fidelity` compares). Where the server does not answer a range request with
206, the whole wheel is downloaded once (through the package index's wheel cache) and the note says
so. A local wheel file (`--vllm PATH.whl`) is read the same way from disk.
"""

from __future__ import annotations

import json
import re
import struct
import tempfile
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from compat.harness.pypi import NoMatchingWheel, PackageIndex, PackageIndexError, default_cache_dir

FORMAT = 1  # bump when what is stored changes
PYTHONS = ("3.11", "3.12", "3.13", "3.10")
PLATFORM = "manylinux_x86_64"
MERGE_GAP = 512 * 1024  # fetch a gap of up to this many bytes rather than issue another request
TAIL = 64 * 1024


class StaticError(RuntimeError):
    """A wheel that cannot be read (unknown release, bad file, unreachable index): the message
    names the input and what would be accepted."""


class UnknownRelease(StaticError):
    """A version that is not a version, or a release the index does not have: bad input, not a failure."""


def kept(name: str) -> bool:
    return name.endswith(".py") or bool(re.fullmatch(r"[^/]+\.dist-info/(METADATA|entry_points\.txt)", name))


@dataclass
class WheelSources:
    """The kept members of one wheel: `read(path)`, `module_file(dotted)`, plus every member's CRC."""

    dist: str
    version: str
    filename: str
    archive: Path
    crcs: dict[str, tuple[int, int]]  # every member of the original wheel: (crc32, size)
    how: str  # "range requests", "whole wheel downloaded: ...", "local wheel"
    _texts: dict[str, str] = field(default_factory=dict, repr=False)

    @cached_property
    def _zip(self) -> zipfile.ZipFile:  # one open archive per release: its directory is read once
        return zipfile.ZipFile(self.archive)

    @cached_property
    def paths(self) -> frozenset[str]:
        return frozenset(self._zip.namelist())

    def read(self, path: str) -> str:
        if path not in self._texts:
            self._texts[path] = self._zip.read(path).decode("utf-8", errors="replace")
        return self._texts[path]

    def read_all(self, prefix: str = "") -> dict[str, str]:
        """Every kept .py member under `prefix` (one pass over the archive)."""
        for name in self._zip.namelist():
            if name.endswith(".py") and name.startswith(prefix) and name not in self._texts:
                self._texts[name] = self._zip.read(name).decode("utf-8", errors="replace")
        return {k: v for k, v in self._texts.items() if k.startswith(prefix) and k.endswith(".py")}

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self.paths:
                return candidate
        return None

    def is_package(self, module: str) -> bool:
        return f"{module.replace('.', '/')}/__init__.py" in self.paths or any(
            p.startswith(module.replace(".", "/") + "/") for p in self.paths)

    def metadata(self) -> str:
        names = [p for p in self.paths if p.endswith(".dist-info/METADATA")]
        return self.read(names[0]) if names else ""

    def describe(self) -> dict[str, Any]:
        return {"dist": self.dist, "version": self.version, "wheel": self.filename, "fetched_by": self.how}


class SourceCache:
    """Sources of released wheels from a package index (PyPI's JSON API), cached on disk."""

    def __init__(self, index: PackageIndex | None = None, cache_dir: Path | None = None):
        self.index = index or PackageIndex()
        self.root = Path(cache_dir or default_cache_dir()) / "static" / "sources"
        self.stats = {"requests": 0, "bytes": 0, "fetched": 0, "cached": 0, "whole_wheels": 0}
        self._loaded: dict[tuple[str, str], WheelSources] = {}

    def releases(self, dist: str) -> list[str]:
        try:
            return self.index.releases(dist)
        except PackageIndexError as exc:
            raise StaticError(str(exc)) from None

    def add_local(self, path: Path) -> WheelSources:
        """A local wheel (a candidate speculators build) that `get` answers for its name and version from now on."""
        sources = local_wheel(path, self.root.parent.parent, dists=(parse_wheel_filename(Path(path).name)[0],))
        self._loaded[(canonicalize_name(sources.dist), sources.version)] = sources
        return sources

    def get(self, dist: str, version: str) -> WheelSources:
        key = (canonicalize_name(dist), version)
        if key not in self._loaded:
            self._loaded[key] = self._get(dist, version)
        return self._loaded[key]

    def _get(self, dist: str, version: str) -> WheelSources:
        info = self._choose(dist, version)
        stored = self.root / f"{info['filename']}.zip"
        index_file = self.root / f"{info['filename']}.json"
        if stored.exists() and index_file.exists():
            saved = json.loads(index_file.read_text())
            if saved.get("format") == FORMAT:
                self.stats["cached"] += 1
                return WheelSources(dist, version, info["filename"], stored, _crc_pairs(saved["crcs"]), saved["how"])
        url = self.index._file_url(dist, info)
        try:
            members, crcs = self._by_ranges(url, int(info.get("size") or 0))
            how = "range requests"
        except _NoRanges as exc:
            wheel = self.index.wheel_for(dist, version, self._python_of(info), PLATFORM)
            members, crcs = read_local(wheel)
            how = f"whole wheel downloaded ({wheel.stat().st_size // 2**20} MB): {exc}"
            self.stats["whole_wheels"] += 1
        self.stats["fetched"] += 1
        store(stored, members)
        index_file.write_text(json.dumps({"format": FORMAT, "how": how, "url": url, "crcs": crcs}))
        return WheelSources(dist, version, info["filename"], stored, _crc_pairs(crcs), how)

    def _choose(self, dist: str, version: str) -> dict[str, Any]:
        try:
            releases = self.index.releases(dist)
        except PackageIndexError as exc:
            raise StaticError(f"{dist} {version}: {exc}") from None
        try:
            wanted = Version(version)
        except InvalidVersion:
            raise UnknownRelease(f"{dist} {version!r} is not a version; expected e.g. 0.16.0") from None
        if wanted not in {Version(r) for r in releases}:
            shown = ", ".join(releases[-8:]) or "none"
            raise UnknownRelease(f"{dist} has no release {version} on the index; its latest releases: {shown}")
        version = next(r for r in releases if Version(r) == wanted)
        last: Exception | None = None
        for python in PYTHONS:
            try:
                info = self.index._choose_file(dist, version, python, PLATFORM)
                return dict(info, _python=python)
            except NoMatchingWheel as exc:
                last = exc
            except PackageIndexError as exc:
                raise StaticError(str(exc)) from None
        raise StaticError(f"{dist} {version}: no wheel for CPython {'/'.join(PYTHONS)} on {PLATFORM}: {last}")

    @staticmethod
    def _python_of(info: dict[str, Any]) -> str:
        return str(info.get("_python", PYTHONS[0]))

    def _range(self, url: str, start: int, end: int) -> bytes:
        """bytes [start, end) of the remote file; _NoRanges unless the server answers 206."""
        request = urllib.request.Request(url, headers={"Range": f"bytes={start}-{end - 1}"})
        try:
            with self.index._open(request) as response:
                if getattr(response, "status", None) != 206:
                    raise _NoRanges(f"{url} answered {getattr(response, 'status', '?')} to a range request")
                data: bytes = response.read()
        except OSError as exc:
            raise _NoRanges(f"range request to {url} failed: {exc}") from None
        if len(data) != end - start:
            raise _NoRanges(f"{url} returned {len(data)} bytes for a {end - start}-byte range")
        self.stats["requests"] += 1
        self.stats["bytes"] += len(data)
        return data

    def _by_ranges(self, url: str, size: int) -> tuple[dict[str, bytes], dict[str, list[int]]]:
        if size <= 0:
            raise _NoRanges("the index gives no file size")
        tail = self._range(url, max(0, size - TAIL), size)
        directory = central_directory(tail, size, lambda a, b: self._range(url, a, b))
        starts = sorted(e.offset for e in directory)
        next_start = {a: b for a, b in zip(starts, starts[1:] + [directory.start])}
        wanted = sorted((e for e in directory if kept(e.name)), key=lambda e: e.offset)
        runs: list[list[int]] = []
        for entry in wanted:
            end = next_start[entry.offset]
            if runs and entry.offset - runs[-1][1] <= MERGE_GAP:
                runs[-1][1] = end
            else:
                runs.append([entry.offset, end])
        blobs = [(a, self._range(url, a, b)) for a, b in runs]
        members = {}
        for entry in wanted:
            start, blob = next((a, b) for a, b in blobs if a <= entry.offset < a + len(b))
            members[entry.name] = entry.extract(blob, entry.offset - start)
        return members, {e.name: [e.crc, e.size] for e in directory}


class _NoRanges(Exception):
    pass


@dataclass(frozen=True)
class Entry:
    name: str
    offset: int
    method: int
    compressed: int
    size: int
    crc: int

    def extract(self, blob: bytes, at: int) -> bytes:
        if blob[at:at + 4] != b"PK\x03\x04":
            raise StaticError(f"{self.name}: no local file header at offset {self.offset}")
        name_len, extra_len = struct.unpack("<HH", blob[at + 26:at + 30])
        start = at + 30 + name_len + extra_len
        raw = blob[start:start + self.compressed]
        if self.method == 0:
            data = raw
        elif self.method == 8:
            data = zlib.decompressobj(-15).decompress(raw)
        else:
            raise StaticError(f"{self.name}: zip compression method {self.method} is not supported")
        if zlib.crc32(data) != self.crc:
            raise StaticError(f"{self.name}: CRC-32 mismatch after extraction")
        return data


class Directory(list["Entry"]):
    start: int = 0


def central_directory(tail: bytes, size: int, fetch: Callable[[int, int], bytes]) -> Directory:
    """The entries of a zip's central directory, from the file's tail (`fetch(a, b)` for more)."""
    at = tail.rfind(b"PK\x05\x06")
    if at < 0:
        raise StaticError("not a zip file: no end-of-central-directory record in its last 64 KiB")
    count, cd_size, cd_offset = struct.unpack("<xxxxxxxxxxHII", tail[at:at + 20])
    z64 = tail.rfind(b"PK\x06\x06", 0, at)
    if z64 >= 0:  # zip64: the real figures are in the zip64 end record
        count, cd_size, cd_offset = struct.unpack("<QQQ", tail[z64 + 32:z64 + 56])
    tail_start = size - len(tail)
    data = tail[cd_offset - tail_start:] if cd_offset >= tail_start else fetch(cd_offset, size)
    entries = Directory()
    entries.start = cd_offset
    pos = 0
    for _ in range(count):
        if data[pos:pos + 4] != b"PK\x01\x02":
            raise StaticError(f"corrupt central directory at entry {len(entries)}")
        method, = struct.unpack("<H", data[pos + 10:pos + 12])
        crc, compressed, usize = struct.unpack("<III", data[pos + 16:pos + 28])
        name_len, extra_len, comment_len = struct.unpack("<HHH", data[pos + 28:pos + 34])
        offset, = struct.unpack("<I", data[pos + 42:pos + 46])
        name = data[pos + 46:pos + 46 + name_len].decode("utf-8", errors="replace")
        extra = data[pos + 46 + name_len:pos + 46 + name_len + extra_len]
        if 0xFFFFFFFF in (compressed, usize, offset):
            usize, compressed, offset = _zip64_extra(extra, usize, compressed, offset)
        entries.append(Entry(name, offset, method, compressed, usize, crc))
        pos += 46 + name_len + extra_len + comment_len
    return entries


def _zip64_extra(extra: bytes, usize: int, compressed: int, offset: int) -> tuple[int, int, int]:
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack("<HH", extra[pos:pos + 4])
        if tag == 1:
            values = list(struct.unpack(f"<{length // 8}Q", extra[pos + 4:pos + 4 + length // 8 * 8]))
            if usize == 0xFFFFFFFF:
                usize = values.pop(0)
            if compressed == 0xFFFFFFFF:
                compressed = values.pop(0)
            if offset == 0xFFFFFFFF:
                offset = values.pop(0)
        pos += 4 + length
    return usize, compressed, offset


def _crc_pairs(crcs: dict[str, list[int]]) -> dict[str, tuple[int, int]]:
    """Each member's [crc32, size] as read or stored in JSON: the (crc32, size) pair WheelSources keeps."""
    return {name: (crc, size) for name, (crc, size) in crcs.items()}


def read_local(path: Path) -> tuple[dict[str, bytes], dict[str, list[int]]]:
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            return ({i.filename: zf.read(i) for i in infos if kept(i.filename)},
                    {i.filename: [i.CRC, i.file_size] for i in infos})
    except (OSError, zipfile.BadZipFile) as exc:
        raise StaticError(f"{path}: cannot read the wheel ({exc}); expected a .whl file (a zip)") from None


def store(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        tmp = Path(handle.name)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            for name in sorted(members):
                zf.writestr(name, members[name])
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def local_wheel(path: Path, cache_dir: Path | None = None, dists: Sequence[str] = ()) -> WheelSources:
    """`--vllm PATH.whl`: the sources of a vLLM wheel file on disk (a nightly, a local build); `dists`: the
    names accepted (default vllm's; a candidate speculators build: speculators)."""
    from compat.harness.matrix import VLLM_DIST, MatrixError, wheel_version

    try:
        option = "--vllm" if not dists else "--speculators"  # the same checks as the command line's
        version, resolved = wheel_version(str(path), option, tuple(dists) or tuple(VLLM_DIST.values()))
    except MatrixError as exc:
        raise StaticError(str(exc)) from None
    path = Path(resolved)
    members, crcs = read_local(path)
    stat = path.stat()
    name = f"{path.name}.{stat.st_size}.{stat.st_mtime_ns}.zip"
    stored = Path(cache_dir or default_cache_dir()) / "static" / "local" / name
    store(stored, members)
    return WheelSources(str(parse_wheel_filename(path.name)[0]), version, path.name, stored, _crc_pairs(crcs),
                        f"local wheel {path}")
