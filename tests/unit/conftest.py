import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _own_results_store(tmp_path_factory, monkeypatch):
    """Every test keeps its runs in a store of its own (compat.harness.store), never the user's cache;
    subprocesses (nox, python -m compat...) inherit it."""
    monkeypatch.setenv("COMPAT_STORE", str(tmp_path_factory.mktemp("store") / "results.sqlite"))
