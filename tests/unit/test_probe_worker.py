"""The probe workers are built on the release's worker extension; when it does not import they
say so (the worker probes then read `error`), instead of passing on a bare `object` base."""

import importlib.util

import pytest

from compat.worker import probe_worker


@pytest.mark.skipif(importlib.util.find_spec("speculators") is not None,
                    reason="speculators is installed here: its extension imports")
def test_a_missing_release_extension_is_reported_with_its_import_failure():
    reply = probe_worker.ProbeWorkerExtension().compat_release_extension()
    assert reply["base"] == "builtins.object"
    assert reply["import_error"].startswith("ModuleNotFoundError: No module named 'speculators")
