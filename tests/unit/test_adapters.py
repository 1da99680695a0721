"""Adapter kinds: the api_only run (which shows the silent faults behind an exception) applies
only exception-fixing adapters; a data-fixing adapter there would hide the very fault it shows."""

import dataclasses

import pytest

from compat.cell import datagen
from compat.cell.adapters import generator as adapters
from compat.shared.breakages import BY_ID
from compat.shared.profiles import profile_for

PROFILE = profile_for("0.4.0.1")


@pytest.fixture
def every_adapter_needed(monkeypatch):
    """As if the installed pair needed every adapter (feature detection answered yes)."""
    monkeypatch.setattr(adapters, "ADAPTERS", tuple(
        dataclasses.replace(a, needed=lambda g, profile: True) for a in adapters.ADAPTERS))


def test_each_adapter_kind_is_that_of_the_breakage_it_fixes():
    """A silent breakage (wrong data, no exception) is fixed by a data adapter, and only those."""
    for adapter in adapters.ADAPTERS:
        silent = BY_ID[adapter.id].symptom.silent
        assert adapter.kind == (adapters.DATA if silent else adapters.EXCEPTION), adapter.id


def test_result_order_and_changed_defaults_are_data_adapters():
    data = {a.id for a in adapters.ADAPTERS if a.kind == adapters.DATA}
    assert data == {"result_order", "prefix_caching_default", "chunked_prefill_default"}


def test_api_only_applies_exception_fixing_adapters_only(every_adapter_needed):
    api_only = datagen.adapters_for("api_only", None, PROFILE)
    assert api_only and {a.kind for a in api_only} == {adapters.EXCEPTION}
    assert "result_order" not in {a.id for a in api_only}


def test_with_compat_applies_every_needed_adapter_and_raw_none(every_adapter_needed):
    assert [a.id for a in datagen.adapters_for("with_compat", None, PROFILE)] == [a.id for a in adapters.ADAPTERS]
    assert datagen.adapters_for("raw", None, PROFILE) == []


def test_an_unknown_mode_or_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="'exceptions_only'.*raw, api_only, with_compat"):
        datagen.adapters_for("exceptions_only", None, PROFILE)
    with pytest.raises(ValueError, match="kind 'silent'.*exception, data"):
        adapters.Adapter("x", "silent", lambda g, p: True, lambda g: None, "")
