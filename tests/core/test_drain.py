"""The drain between live steps (kvtui.explore.live_step.LiveStepExecutor._drain), on a virtual clock.

CI, vllm-cpu: a request the client cut at a step's end was still in vLLM's front end when the
drain's first scrape read running = waiting = 0; it reached the engine after kvtui's closing
scrape, and the step's prefix-cache hit rate missed it (0.7314 = 6 hits of 7 against the
counters' 7 of 8). The drain now ends on two idle scrapes DRAIN_QUIET_S apart with still counters,
and waits for stillness DRAIN_STILL_MAX_S at most (a server shared with other clients). The
server here is scripted: a request arriving late in a front end is a fault no real part gives
on demand. Each scrape is read at a virtual time; nothing waits on the wall."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvtui import clock
from kvtui.core.drain import QUIET_S as DRAIN_QUIET_S
from kvtui.core.drain import STILL_MAX_S as DRAIN_STILL_MAX_S
from kvtui.core.drain import DrainWatch
from kvtui.explore.live_step import LiveStepExecutor
from kvtui.runtime.telemetry.prom_windows import counter_values
from kvtui.runtime.telemetry.types import MetricsSample


class ScriptedServer:
    """/metrics as a function of (virtual) time: `late_at` is when the cut request reaches the engine."""

    def __init__(self, late_at: float | None, busy_until: float = 0.0, moving: bool = False):
        self.t0 = clock.monotonic()
        self.late_at, self.busy_until, self.moving = late_at, busy_until, moving
        self.scrapes: list[float] = []
        self.scraper = object()
        self.dead = None

    def scrape_now(self) -> MetricsSample:
        t = clock.monotonic() - self.t0
        self.scrapes.append(t)
        queries = 4200.0 + (600.0 if self.late_at is not None and t >= self.late_at else 0.0)
        if self.moving:  # another client's short requests, finished between scrapes
            queries += 100.0 * len(self.scrapes)
        return MetricsSample(t=t, running=1.0 if t < self.busy_until else 0.0, waiting=0.0,
                             prompt_tokens=queries, generation_tokens=32.0, prefix_cache_queries=queries,
                             prefix_cache_hits=3072.0, requests_success=7.0, preemptions=0.0)


def _drain(server: ScriptedServer) -> tuple[float, list[str]]:
    warnings: list[str] = []
    run = SimpleNamespace(scenario=SimpleNamespace(ramp=SimpleNamespace(drain_timeout_s=120.0)),
                          stopping=False, skipping=False, emit=lambda e: warnings.append(str(e)))
    me = SimpleNamespace(run=run)
    t0 = clock.monotonic()
    LiveStepExecutor._drain(me, server)  # type: ignore[arg-type]
    return clock.monotonic() - t0, warnings


def test_a_request_that_reaches_the_engine_after_the_first_idle_scrape_is_waited_for():
    with clock.use(clock.VirtualClock()):
        server = ScriptedServer(late_at=0.1)
        took, warnings = _drain(server)
        # scrape 1 (t=0) idle, the late request moves the counters by scrape 2: not still; scrape 3 still
        assert len(server.scrapes) == 3 and not warnings
        assert server.scrape_now().prefix_cache_queries == 4800.0
        assert took == pytest.approx(2 * DRAIN_QUIET_S)


def test_an_idle_still_server_drains_in_one_quiet_interval_and_a_busy_one_waits():
    with clock.use(clock.VirtualClock()):
        took, _ = _drain(ScriptedServer(late_at=None))
        assert took == pytest.approx(DRAIN_QUIET_S)
    with clock.use(clock.VirtualClock()):
        server = ScriptedServer(late_at=None, busy_until=1.0)
        took, _ = _drain(server)
        assert server.scrapes[0] == 0.0 and all(t < 1.0 for t in server.scrapes[:-2])
        assert 1.0 <= took <= 1.0 + 0.25 + DRAIN_QUIET_S


def test_counters_that_never_still_end_the_wait_after_the_bound_not_the_drain_timeout():
    with clock.use(clock.VirtualClock()):
        took, warnings = _drain(ScriptedServer(late_at=None, moving=True))
        assert DRAIN_STILL_MAX_S <= took <= DRAIN_STILL_MAX_S + DRAIN_QUIET_S and not warnings
        assert took < 120.0


def test_the_counters_compared_are_the_ones_a_request_moves():
    a = MetricsSample(t=0, prompt_tokens=1, generation_tokens=2, prefix_cache_queries=3, requests_success=4,
                      preemptions=5)
    for field in ("prompt_tokens", "generation_tokens", "prefix_cache_queries", "requests_success", "preemptions"):
        b = MetricsSample(**{**a.__dict__, field: getattr(a, field) + 1})
        assert counter_values(a) != counter_values(b), field


def test_the_drain_rule_on_plain_numbers():
    """kvtui.core.drain.DrainWatch alone: busy scrapes poll, an idle one waits the quiet interval, a
    second idle one with the same counters ends it, moving counters restart the count, and
    stillness is waited for STILL_MAX_S at most."""
    w = DrainWatch(quiet_s=0.3, still_max_s=2.0)
    assert w.observe(0.0, 3, 0, (10,)) == 0.25  # running
    assert w.observe(0.25, 0, 1, (10,)) == 0.25  # waiting
    assert w.observe(0.5, 0, 0, (10,)) == 0.3  # first idle scrape
    assert w.observe(0.8, 0, 0, (12,)) == 0.3  # idle, but a late request moved the counters
    assert w.observe(1.1, 0, 0, (12,)) is None  # idle and still: drained
    w = DrainWatch(quiet_s=0.3, still_max_s=2.0)
    t, k, waits = 0.0, 0, []
    while (dt := w.observe(t, 0, 0, (k,))) is not None:  # another client keeps moving the counters
        waits.append(dt)
        t, k = t + dt, k + 1
    assert 2.0 <= t <= 2.0 + 0.3 and len(waits) == 7
