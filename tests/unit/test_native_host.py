"""import_host applies backend setups: once per list, again when a process switches lists."""

import sys
import types

import pytest

from service import native_host


@pytest.fixture
def calls(monkeypatch):
    record: list[str] = []
    module = types.ModuleType("fake_setups")
    module.first = lambda: record.append("first")
    module.second = lambda: record.append("second")
    monkeypatch.setitem(sys.modules, "fake_setups", module)
    monkeypatch.setattr(native_host, "_applied", ())
    return record


def test_a_list_is_applied_once(calls):
    native_host.import_host(("fake_setups:first", "fake_setups:second"))
    native_host.import_host(("fake_setups:first", "fake_setups:second"))
    native_host.import_host(())
    assert calls == ["first", "second"]


def test_switching_lists_applies_the_new_one_even_if_seen_before(calls):
    """An embedded engine with the test provider, then one with the default setup, then the
    test provider again: the third must reinstall it, or the process keeps the second's."""
    native_host.import_host(("fake_setups:first",))
    native_host.import_host(("fake_setups:second",))
    native_host.import_host(("fake_setups:first",))
    assert calls == ["first", "second", "first"]


def test_a_malformed_setup_is_named(calls):
    with pytest.raises(ValueError, match="'fake_setups' must be 'module:function'"):
        native_host.import_host(("fake_setups",))
