"""Small wheel-like fixtures for the static layer's tests: zips with .py members and a big
compiled-looking blob, served from memory by an opener that answers HTTP Range requests (or not)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import textwrap
import zipfile
from pathlib import Path

from compat.harness.pypi import PackageIndex
from compat.harness.static.sources import SourceCache, WheelSources, read_local, store


def wheel_bytes(dist: str, version: str, files: dict[str, str], blobs: dict[str, bytes] | None = None,
                requires: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        members = {**{k: textwrap.dedent(v) for k, v in files.items()}, **(blobs or {})}
        for name in sorted(members):  # a wheel writes its members in path order, .so among the .py
            zf.writestr(name, members[name])
        meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(
            f"Requires-Dist: {r}\n" for r in requires)
        zf.writestr(f"{dist.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return buffer.getvalue()


def sources_of(tmp_path: Path, dist: str, version: str, files: dict[str, str]) -> WheelSources:
    """WheelSources straight from files (no index): for api/check tests."""
    path = tmp_path / f"{dist}-{version}-py3-none-any.whl"
    path.write_bytes(wheel_bytes(dist, version, files))
    members, crcs = read_local(path)
    stored = tmp_path / f"{path.name}.zip"
    store(stored, members)
    return WheelSources(dist, version, path.name, stored, {k: tuple(v) for k, v in crcs.items()}, "test")


class _Response(io.BytesIO):
    def __init__(self, data: bytes, status: int):
        super().__init__(data)
        self.status = status


class RangePyPI:
    """Serves https://index.test/pypi/<dist>/json and the files; answers Range with 206 unless
    ranges=False (then 200 and the whole file, as a server without range support)."""

    def __init__(self, wheels: dict[str, bytes], ranges: bool = True):
        self.wheels, self.ranges, self.requests, self.bytes_sent = wheels, ranges, [], 0
        self.projects: dict[str, dict] = {}
        for filename, data in wheels.items():
            dist, version = filename.split("-")[:2]
            releases = self.projects.setdefault(dist.replace("_", "-"), {"releases": {}})["releases"]
            releases.setdefault(version, []).append(
                {"filename": filename, "url": f"../../packages/{filename}", "size": len(data),
                 "digests": {"sha256": hashlib.sha256(data).hexdigest()}})

    def __call__(self, request):
        url = request.full_url
        self.requests.append((url, request.get_header("Range")))
        match = re.fullmatch(r"https://index\.test/pypi/([^/]+)/json", url)
        if match:
            return _Response(json.dumps(self.projects[match.group(1)]).encode(), 200)
        data = self.wheels[url.rsplit("/", 1)[1]]
        wanted = request.get_header("Range")
        if wanted and self.ranges:
            start, end = (int(x) for x in wanted.split("=")[1].split("-"))
            self.bytes_sent += end + 1 - start
            return _Response(data[start:end + 1], 206)
        self.bytes_sent += len(data)
        return _Response(data, 200)


def cache_for(tmp_path: Path, opener: RangePyPI) -> SourceCache:
    index = PackageIndex(tmp_path / "cache", base_url="https://index.test/pypi", opener=opener)
    return SourceCache(index, cache_dir=tmp_path / "cache")


BLOB = os.urandom(2 * 1024 * 1024)  # incompressible "compiled code" between the sources
