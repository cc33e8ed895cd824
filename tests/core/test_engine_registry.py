"""The engine registry: the built-in engines by name, a new one by registering, a typo refused."""

from __future__ import annotations

import pytest

from kvtui.errors import UsageError
from kvtui.runtime.engines import registry


def test_builtin_engines_are_created_by_name_and_are_complete_engines():
    for name in ("sim", "vllm", "external"):
        e = registry.create(name)
        assert e.name == name
        assert isinstance(e.simulated, bool) and e.time_scale == 1.0
        assert e.pids() == set()  # nothing started yet
        assert e.gpu_memory() is None
    assert registry.create("sim") is not registry.create("sim")  # a fresh engine per run


def test_an_unknown_engine_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown engine 'vlm'"):
        registry.create("vlm")


def test_a_registered_engine_is_created(monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))

    @registry.register("toy")
    class Toy:
        name = "toy"

    assert isinstance(registry.create("toy"), Toy) and "toy" in registry.names()
