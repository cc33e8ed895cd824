"""StartupFacts of a data-parallel server: one engine's KV figures become the server's, once."""

from __future__ import annotations

import pytest

from kvtui.runtime.engines.vllm.cache_facts import engines_in_metrics
from kvtui.runtime.telemetry.types import StartupFacts

TWO_ENGINES = """\
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",kv_cache_size_tokens="24320",num_gpu_blocks="380"} 1.0
vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="1",kv_cache_size_tokens="24320",num_gpu_blocks="380"} 1.0
"""


def test_engines_are_counted_from_the_cache_config_labels():
    assert engines_in_metrics(TWO_ENGINES) == 2
    one = "\n".join(TWO_ENGINES.splitlines()[:2]) + "\n"
    assert engines_in_metrics(one) == 1
    assert engines_in_metrics("") == 1 and engines_in_metrics("not prometheus {{{") == 1


def test_kv_figures_are_summed_over_the_engines_once():
    f = StartupFacts(kv_cache_tokens=24320, num_gpu_blocks=380, kv_cache_gib=0.0466, max_concurrency_reported=11.875,
                     weights_gib=0.01, block_size=128)
    f.summed_over_engines(2)
    assert (f.engines, f.kv_cache_tokens, f.num_gpu_blocks) == (2, 48640, 760)
    assert f.kv_cache_gib == pytest.approx(0.0932) and f.max_concurrency_reported == pytest.approx(23.75)
    assert (f.weights_gib, f.block_size) == (0.01, 128)  # each engine's copy of the weights; a block is a block
    f.summed_over_engines(2)  # a second call (another /metrics read) changes nothing
    assert f.kv_cache_tokens == 48640
    g = StartupFacts(kv_cache_tokens=100)
    g.summed_over_engines(1)
    assert g.engines is None and g.kv_cache_tokens == 100
