"""The real vLLM engine: launcher (VllmEngine), startup log parser, failure classes, reaper, tiny model.

`from kvtui.runtime.engines.vllm import VllmEngine` (imported lazily, so that the log parser can be
used without httpx).
"""

from __future__ import annotations

__all__ = ["VllmEngine", "install_signal_handlers"]


def __getattr__(name: str):
    if name in __all__:
        from kvtui.runtime.engines.vllm import launcher

        return getattr(launcher, name)
    raise AttributeError(name)
