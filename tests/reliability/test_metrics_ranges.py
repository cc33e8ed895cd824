"""Numbers from /metrics are untrusted numbers too (issue #30, class 6): every gauge, counter and
histogram series is checked against its valid range at parse (kv usage 0–1, counts ≥ 0, all
finite); a value outside it is dropped (so no verdict or "limited by" uses it) and named in the
sample's out_of_range, which the step carries; a counter that goes down is a flagged reset."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtui.runtime.telemetry.prom import _COUNTERS, _GAUGES, _HISTOGRAMS, COUNTER_FIELDS, GAUGE_FIELDS, parse_metrics
from kvtui.runtime.telemetry.prom_windows import window_delta

GOOD = {"kv_usage": 0.5, "running": 3.0, "waiting": 1.0}
BASE_COUNTERS = {f: 10.0 for f in COUNTER_FIELDS}


def num(v: float) -> str:
    return "NaN" if math.isnan(v) else "+Inf" if v == math.inf else "-Inf" if v == -math.inf else repr(v)


def body(gauges: dict[str, float], counters: dict[str, float], hist: tuple[str, float, float] | None = None) -> str:
    lines = []
    for f, v in gauges.items():
        lines.append(f'{_GAUGES[f][0]}{{model_name="m"}} {num(v)}')
    for f, v in counters.items():
        lines.append(f'{_COUNTERS[f][0]}_total{{model_name="m"}} {num(v)}')
    if hist:
        key, s, c = hist
        n = _HISTOGRAMS[key][0]
        lines += [f'{n}_bucket{{le="+Inf",model_name="m"}} {num(c)}', f'{n}_sum{{model_name="m"}} {num(s)}',
                  f'{n}_count{{model_name="m"}} {num(c)}']
    return "\n".join(lines) + "\n"


def valid(field: str, v: float, part: str = "") -> bool:
    """The range of each series: kv usage a fraction, a histogram's sum ≥ 0, every other figure a
    count (a whole number from 0 to 2**53)."""
    if not math.isfinite(v):
        return False
    if field == "kv_usage":
        return 0 <= v <= 1
    if part == "_sum":
        return v >= 0
    return 0 <= v <= 2**53 and float(v).is_integer()


EDGE = st.sampled_from([0.0, 1.0, 1.0000001, -0.0000001, -1.0, 57.0, 100.0, math.nan, math.inf, -math.inf, 1e300,
                        1e308, 2.0**53, 2.0**53 + 2, 2.5, 0.5])


@given(field=st.sampled_from(GAUGE_FIELDS), v=st.one_of(EDGE, st.floats(-1e6, 1e6, allow_nan=False)))
def test_every_gauge_at_and_past_its_range(field, v) -> None:
    s = parse_metrics(body({**GOOD, field: v}, BASE_COUNTERS), t=0.0)
    assert s.ok
    if valid(field, v):
        assert getattr(s, field) == pytest.approx(v) and not s.out_of_range
    else:
        assert getattr(s, field) is None
        assert any(x.startswith(field + "=") for x in s.out_of_range)
    for other, gv in GOOD.items():  # the other series are untouched
        if other != field:
            assert getattr(s, other) == gv


@given(field=st.sampled_from(COUNTER_FIELDS), v=st.one_of(EDGE, st.floats(-1e9, 1e9, allow_nan=False)))
def test_every_counter_at_and_past_its_range(field, v) -> None:
    s = parse_metrics(body(GOOD, {**BASE_COUNTERS, field: v}), t=0.0)
    if valid(field, v):
        assert getattr(s, field) == pytest.approx(v)
    else:
        assert getattr(s, field) is None and any(x.startswith(field + "=") for x in s.out_of_range)


@given(key=st.sampled_from(list(_HISTOGRAMS)), total=EDGE, count=st.sampled_from([0.0, 5.0, -1.0, math.nan]))
def test_every_histogram_at_and_past_its_range(key, total, count) -> None:
    s = parse_metrics(body(GOOD, BASE_COUNTERS, (key, total, count)), t=0.0)
    if valid(key, total, "_sum") and valid(key, count):
        assert key in s.histograms
    else:
        assert key not in s.histograms and any(x.startswith(key) for x in s.out_of_range)


@given(field=st.sampled_from(COUNTER_FIELDS), drop=st.integers(1, 10**6))
def test_a_counter_that_goes_down_is_a_flagged_reset_and_no_delta(field, drop) -> None:
    before = parse_metrics(body(GOOD, {**BASE_COUNTERS, field: 1e6}), t=0.0)
    after = parse_metrics(body(GOOD, {**BASE_COUNTERS, field: 1e6 - drop}), t=1.0)
    d = window_delta(before, after)
    assert d["counter_reset"] is True and d[field] is None


def test_a_step_carries_the_out_of_range_flag_and_no_kv_figure() -> None:
    """Through the telemetry window into the stored step (evaluate): flagged, and the value
    used by no verdict or label (it is None there)."""
    from kvtui.explore.telemetry_loop import TelemetryLoop

    tel = TelemetryLoop.__new__(TelemetryLoop)
    tel.samples = [parse_metrics(body({**GOOD, "kv_usage": 57.0}, BASE_COUNTERS), t=1.0)]
    tel.interval_s = 0.5
    tel.replica_names = []
    tel.scraper, tel.metrics_error = None, None  # the scrape itself is not what is tested: its sample is
    w = tel.window(0.0, 2.0)
    assert "kv_usage_max" not in w and w["metrics_out_of_range"] == ["kv_usage=57.0"]


def test_the_headless_step_line_says_which_metrics_were_out_of_range() -> None:
    """The flag is shown where the step is read (issue 30 item 6), not only stored."""
    from kvtui.cli.headless_print import step_line

    pct = {"n": 10, "p50": 1.0, "p95": 2.0, "p99": 3.0}
    step = {"load": 4, "requests": 10, "output_tok_s": 100.0, "passed": True, "errors": 0, "error_rate": 0.0,
            "ttft_ms": pct, "tpot_ms": pct, "itl_ms": pct, "e2e_ms": pct,
            "metrics_out_of_range": ["kv_usage=57.0"]}
    assert "metrics out of range: kv_usage=57.0" in step_line("m", step, [])
    del step["metrics_out_of_range"]
    assert "out of range" not in step_line("m", step, [])


def test_the_markdown_report_and_the_step_table_say_which_metrics_were_out_of_range() -> None:
    """The same flag in the exported report and in the TUI's step table (the why column; the KV
    cell flagged instead of a blank)."""
    import lzma

    from kvtui.report.markdown import render_markdown
    from kvtui.tui.steptable import out_of_range

    doc = json.loads(lzma.decompress((Path(__file__).resolve().parents[2] / "docs/results/h200-kvb-seeded.json.xz").read_bytes()))
    step = doc["modes"][0]["steps"][0]
    assert "out of range" not in render_markdown(doc) and out_of_range(step) == ""
    step["metrics_out_of_range"] = ["kv_usage=57.0"]
    md = render_markdown(doc)
    assert f"**/metrics out of range** at load {step['load']:.0f}: kv_usage=57.0" in md
    assert out_of_range(step) == " ⚑ /metrics out of range: kv_usage=57.0"


def _series(name: str, engine: str, v: float) -> str:
    return f'{name}{{engine="{engine}",model_name="m"}} {num(v)}'


@given(field=st.sampled_from(GAUGE_FIELDS), bad=EDGE, good=st.sampled_from([0.0, 0.3, 1.0, 10.0]))
def test_one_engine_out_of_range_is_never_hidden_by_the_sum_or_mean_over_engines(field, bad, good) -> None:
    """Each series is checked before it is summed or averaged: running -5 on one engine and 10 on
    another is not 5; kv usage 1.5 and 0.3 is not a mean of 0.9."""
    if field == "kv_usage":
        good = min(good, 1.0)
    lines = [_series(_GAUGES[f][0], "0", v) for f, v in GOOD.items() if f != field]
    lines += [_series(_GAUGES[field][0], "0", bad), _series(_GAUGES[field][0], "1", good)]
    lines += [f'{_COUNTERS[f][0]}_total{{model_name="m"}} 10' for f in COUNTER_FIELDS]
    s = parse_metrics("\n".join(lines) + "\n", t=0.0)
    total = (bad + good) / 2 if field == "kv_usage" else bad + good
    if valid(field, bad) and valid(field, good) and valid(field, total):
        assert getattr(s, field) is not None and not s.out_of_range
    else:
        assert getattr(s, field) is None and any(x.startswith(field) for x in s.out_of_range)
        if not valid(field, bad):  # the engine's own figure is dropped too, not shown per engine
            assert all(field not in figs for figs in s.engines.values())


@pytest.mark.parametrize("buckets, count, why", [
    ({"0.1": 5, "0.5": 3, "+Inf": 5}, 5, "bucket"),  # a cumulative bucket that goes down
    ({"0.1": 2, "+Inf": 4}, 5, "+Inf bucket"),  # +Inf is not the count
    ({"0.1": 2.5, "+Inf": 5}, 5, "bucket"),  # half a request
])
def test_a_histogram_that_cannot_be_one_is_dropped_and_named(buckets, count, why) -> None:
    n = _HISTOGRAMS["ttft"][0]
    lines = [f'{n}_bucket{{le="{le}",model_name="m"}} {c}' for le, c in buckets.items()]
    lines += [f'{n}_sum{{model_name="m"}} 1.0', f'{n}_count{{model_name="m"}} {count}']
    s = parse_metrics(body(GOOD, BASE_COUNTERS) + "\n".join(lines) + "\n", t=0.0)
    assert "ttft" not in s.histograms and any(x.startswith("ttft") and why in x for x in s.out_of_range), s.out_of_range


def test_a_gauge_written_as_a_string_is_a_failed_scrape_not_a_figure() -> None:
    s = parse_metrics(body(GOOD, BASE_COUNTERS).replace(f"{_GAUGES['running'][0]}{{model_name=\"m\"}} 3.0",
                                                        f'{_GAUGES["running"][0]}{{model_name="m"}} "3"'), t=0.0)
    assert not s.ok and s.running is None and "unparseable" in (s.error or "")


def test_a_step_no_telemetry_sample_fell_in_still_has_its_gpu_memory() -> None:
    """A loaded host starved the telemetry thread through a short step (a CI run saw it): the step
    takes the memory reading at its end, not None, so the comparison's peak GiB has every step."""
    from kvtui.explore.telemetry_loop import TelemetryLoop

    class StarvedSimEngine:  # the fault (a thread that never ran in the window) a real part can't make on demand
        def gpu_memory(self) -> dict[str, float]:
            return {"used_gib": 70.5, "gpu_total_gib": 80.0}

    tel = TelemetryLoop.__new__(TelemetryLoop)
    tel.engine, tel.tp, tel.nvml, tel.t0, tel.interval_s = StarvedSimEngine(), 2, None, 100.0, 1.0
    tel.rows = [{"t": 1.0, "gpu_mem_used_gib": 150.0}]  # a sample long before the step: not its figure
    assert tel.gpu_mem_max(110.0, 112.0) == 141.0  # 2 ranks × 70.5, read at the step's end
    tel.rows.append({"t": 11.5, "gpu_mem_used_gib": 120.0})  # a sample inside the step wins
    assert tel.gpu_mem_max(110.0, 112.0) == 120.0
