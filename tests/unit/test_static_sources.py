"""The wheel source cache: only the .py members are fetched, by range requests; the whole wheel
only when the server refuses ranges; every member's CRC kept; bad input named."""

from __future__ import annotations

import pytest

from compat.harness.static.sources import StaticError, local_wheel
from static_wheels import BLOB, RangePyPI, cache_for, wheel_bytes

FILES = {"vllm/__init__.py": "X = 1\n", "vllm/a.py": "def f(x):\n    return x\n", "vllm/z.py": "class Z: ...\n"}


def wheels():
    return {"vllm-1.0.0-py3-none-any.whl": wheel_bytes("vllm", "1.0.0", FILES, {"vllm/m_C.abi3.so": BLOB}),
            "vllm-1.1.0-py3-none-any.whl": wheel_bytes("vllm", "1.1.0", FILES)}


def test_only_the_sources_are_fetched_by_range_requests_and_cached(tmp_path):
    opener = RangePyPI(wheels())
    cache = cache_for(tmp_path, opener)
    sources = cache.get("vllm", "1.0.0")
    assert sources.how == "range requests"
    assert sources.read("vllm/a.py").startswith("def f")
    assert "vllm/m_C.abi3.so" not in sources.paths and "vllm/m_C.abi3.so" in sources.crcs
    assert opener.bytes_sent < len(BLOB) / 4  # the 2 MiB blob between the sources was not read
    sent = len(opener.requests)
    again = cache_for(tmp_path, opener).get("vllm", "1.0.0")  # a new process: from the disk cache
    assert again.read("vllm/z.py") == "class Z: ...\n"
    assert [r for r in opener.requests[sent:] if r[1]] == []


def test_a_server_without_ranges_gets_the_whole_wheel_once_and_says_so(tmp_path):
    opener = RangePyPI(wheels(), ranges=False)
    sources = cache_for(tmp_path, opener).get("vllm", "1.0.0")
    assert sources.how.startswith("whole wheel downloaded")
    assert sources.read("vllm/a.py").startswith("def f")


def test_an_unknown_release_names_the_version_and_what_exists(tmp_path):
    with pytest.raises(StaticError, match=r"vllm has no release 9\.9\.9 .* 1\.0\.0, 1\.1\.0"):
        cache_for(tmp_path, RangePyPI(wheels())).get("vllm", "9.9.9")
    with pytest.raises(StaticError, match="'latest' is not a version"):
        cache_for(tmp_path, RangePyPI(wheels())).get("vllm", "latest")


def test_a_bad_local_wheel_is_refused_naming_the_path(tmp_path):
    bad = tmp_path / "vllm-1.0.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(StaticError, match=f"{bad}: cannot read the wheel"):
        local_wheel(bad, cache_dir=tmp_path)
    with pytest.raises(StaticError, match="no such wheel file"):
        local_wheel(tmp_path / "missing.whl", cache_dir=tmp_path)


def test_a_local_wheel_is_read_like_a_release(tmp_path):
    path = tmp_path / "vllm-1.2.0.dev3+gabc-py3-none-any.whl"
    path.write_bytes(wheel_bytes("vllm", "1.2.0.dev3+gabc", FILES))
    sources = local_wheel(path, cache_dir=tmp_path)
    assert sources.version == "1.2.0.dev3+gabc" and sources.module_file("vllm.a") == "vllm/a.py"


def test_a_corrupt_member_is_an_error_not_wrong_sources(tmp_path):
    data = bytearray(wheel_bytes("vllm", "1.0.0", {"vllm/a.py": "def f(x):\n    return x\n" * 50}))
    at = data.find(b"PK\x03\x04") + 30 + len(b"vllm/a.py") + 5
    data[at] ^= 0xFF  # one byte of the compressed source
    opener = RangePyPI({"vllm-1.0.0-py3-none-any.whl": bytes(data)})
    with pytest.raises(Exception, match="CRC-32 mismatch|invalid|Error"):
        cache_for(tmp_path, opener).get("vllm", "1.0.0")
