"""vLLM's torch.compile cache (issue 28, item 7): where kvtui keeps it, and each start's cache
state parsed from the real startup logs (H200 vLLM 0.26: cold compiles; a warm start's lines as
vllm/compilation/backends.py and decorators.py print them)."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

from kvtui.runtime.engines.vllm import compile_cache as cc
from kvtui.runtime.engines.vllm.logparse import StartupLogParser

DATA = Path(__file__).resolve().parent.parent / "vllm" / "data"


def _log(name: str) -> str:
    """A captured log of tests/vllm/data (the larger ones stored as NAME.xz)."""
    xz = DATA / (name + ".xz")
    return (lzma.decompress(xz.read_bytes()) if xz.exists() else (DATA / name).read_bytes()).decode("utf-8")

WARM = """(EngineCore pid=7) INFO 12-02 10:00:01 [backends.py:1094] Using cache directory: /c/vllm/torch_compile_cache/94571c06af/rank_0_0/backbone for vLLM's torch.compile
(EngineCore pid=7) INFO 12-02 10:00:02 [decorators.py:320] Directly load AOT compilation from path /c/vllm/torch_compile_cache/torch_aot_compile/d8/rank_0_0/model
(EngineCore pid=7) INFO 12-02 10:00:03 [backends.py:296] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.912 s
(EngineCore pid=7) INFO 12-02 10:00:03 [monitor.py:53] torch.compile took 2.41 s in total
"""


@pytest.mark.parametrize("name", ["h200-0.26.0-startup-bf16.log", "h200-0.26.0-startup-kv-fp8.log",
                                  "h200-0.26.0-startup-w-fp8.log", "h200-0.26.0-startup-w-fp8-kv-fp8.log"])
def test_a_start_that_compiled_is_a_miss_and_names_its_cache_entry(name):
    f = StartupLogParser().feed_many(_log(name).splitlines()).facts
    assert f.compile_cache == "miss" and f.compile_s and f.compile_s > 10
    assert f.compile_cache_dir and "torch_compile_cache" in f.compile_cache_dir
    assert cc.state(f.compile_cache, had_graphs=False) == "cold"  # the launcher found the root empty
    assert cc.state(f.compile_cache, had_graphs=True) == "miss"
    assert "(cache cold)" in cc.start_line({**f.to_dict(), "compile_cache": "cold"})


def test_a_warm_start_is_a_hit_and_a_cpu_start_without_compile_says_nothing():
    f = StartupLogParser().feed_many(WARM.splitlines()).facts
    assert f.compile_cache == "hit" and cc.state("hit", had_graphs=True) == "hit"
    assert f.compile_s == 2.41 and cc.start_line(f.to_dict()) == "torch.compile 2.4 s (cache hit)"
    cpu = StartupLogParser().feed_many(_log("cpu-0.32.0-startup-kv-auto.log").splitlines()).facts
    assert cpu.compile_cache is None and cc.start_line(cpu.to_dict()) == ""


def test_kvtui_keeps_the_cache_in_a_per_user_directory_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    got = cc.cache_env({})
    assert got == {"VLLM_CACHE_ROOT": str(tmp_path / "xdg" / "kvtui" / "vllm")}
    root = Path(__file__).resolve().parents[2]
    assert root not in Path(got["VLLM_CACHE_ROOT"]).parents  # never the checkout
    assert cc.cache_env({"VLLM_CACHE_ROOT": "/mine"}) == {}  # the user's own root wins
    assert cc.cache_env({}, {"VLLM_CACHE_ROOT": "/scenario"}) == {}
    assert cc.cache_env({"KVTUI_VLLM_CACHE_ROOT": "vllm"}) == {}  # vLLM's own default
    assert cc.cache_env({"KVTUI_VLLM_CACHE_ROOT": str(tmp_path / "c")}) == {"VLLM_CACHE_ROOT": str(tmp_path / "c")}
    r = tmp_path / "c"
    assert not cc.has_graphs(r)
    (r / "torch_compile_cache" / "94571c06af").mkdir(parents=True)
    assert cc.has_graphs(r) and cc.root_of({"VLLM_CACHE_ROOT": str(r)}) == r
