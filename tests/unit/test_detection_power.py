"""bench/detection_power.py edits an installed vLLM: the edit must reach that one path, never the file a uv cache
shares with every other venv built from the wheel (hardlinks), and the path must read its own content afterwards."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "detection_power.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("detection_power", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_an_edit_never_writes_into_a_file_another_venv_shares(tmp_path):
    bench = load_bench()
    cache = tmp_path / "cache.py"
    cache.write_text("original\n")
    venv = tmp_path / "venv.py"
    os.link(cache, venv)  # as uv installs: the venv's file is the cache's
    with bench.edited(venv, "faulty\n"):
        assert venv.read_text() == "faulty\n"
        assert cache.read_text() == "original\n"
    assert venv.read_text() == cache.read_text() == "original\n"
    assert os.path.samefile(venv, cache), "restored: the same file again, not a copy"
    with pytest.raises(RuntimeError), bench.edited(venv, "faulty\n"):
        raise RuntimeError("the run failed")
    assert venv.read_text() == cache.read_text() == "original\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.py", "venv.py"]
