"""The engines by name: `create("vllm")` gives a fresh engine for one run.

Modelled on GuideLLM's `Backend.register`/`create`: an engine class registers itself with
`@register("name")`. The built-in engines are imported on first use only (the vLLM launcher
and the simulator pull in more than a run of another engine needs).
"""

from __future__ import annotations

import importlib
from typing import Callable

from kvtui.errors import UsageError
from kvtui.runtime.engines.base import Engine

_FACTORIES: dict[str, Callable[[], Engine]] = {}
# name -> the module whose import registers it
_BUILTIN = {
    "sim": "kvtui.simulator.engine.launcher",
    "vllm": "kvtui.runtime.engines.vllm.launcher",
    "external": "kvtui.runtime.engines.external",
}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: `create(name)` will build this class (with no arguments)."""

    def deco(cls: type) -> type:
        _FACTORIES[name] = cls
        return cls

    return deco


def names() -> list[str]:
    return sorted(set(_BUILTIN) | set(_FACTORIES))


def create(name: str) -> Engine:
    """A new engine of this name; UsageError for a name nobody registered."""
    if name not in _FACTORIES and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UsageError(f"unknown engine {name!r}")
    return factory()
