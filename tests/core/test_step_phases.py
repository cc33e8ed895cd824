"""A step's phases (kvtui.core.phases): the rules both transports run, on plain numbers.

The live load generator (kvtui.runtime.load.generator) and the simulator's continuous client
(kvtui.simulator.engine.continuous) hand their counts to `StepPhases`; these tests drive it with
numbers alone, as a virtual clock would: no process, no server, no reading of the time.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from kvtui.core.births import births_cutoff
from kvtui.core.phases import PhaseRules, Progress, StepPhases

ROOT = Path(__file__).resolve().parents[2]
WARM = Progress(warm=True)


def _opened(rules: PhaseRules, at: float = 0.0) -> StepPhases:
    ph = StepPhases(rules, at)
    assert ph.advance(at + rules.warm_from_s + rules.warmup_s, WARM) == "window"
    return ph


def test_the_window_opens_after_warmup_and_warm_slots_not_before():
    ph = StepPhases(PhaseRules(warmup_s=5.0, window_s=10.0), t_start=100.0)
    assert ph.advance(104.9, WARM) is None  # warm, but the warm-up is not over
    assert ph.advance(106.0, Progress(warm=False)) is None  # over, but a slot has not finished a request
    assert ph.phase == "warmup" and ph.t_window_start is None
    assert ph.advance(107.5, WARM) == "window"
    assert ph.t_window_start == 107.5


def test_the_stagger_is_counted_before_the_warmup_and_the_cap_opens_a_window_of_cold_slots():
    ph = StepPhases(PhaseRules(warmup_s=2.0, window_s=10.0, warm_from_s=3.0, warm_cap_s=4.0), t_start=0.0)
    assert ph.advance(4.9, WARM) is None  # 3 s of stagger, then 2 s of warm-up
    assert ph.advance(5.0, Progress(warm=False)) is None
    assert ph.advance(8.9, Progress(warm=False)) is None
    assert ph.advance(9.0, Progress(warm=False)) == "window"  # 5 s + the 4 s cap, slots still cold


def test_a_timed_window_waits_for_the_samples_its_percentiles_need_but_not_forever():
    ph = _opened(PhaseRules(warmup_s=1.0, window_s=10.0, min_window_requests=40, max_window_factor=3.0))
    assert ph.advance(10.9, Progress(window_started=100)) is None
    assert ph.advance(11.0, Progress(window_started=39)) is None  # 10 s, but 39 < 40 samples
    assert ph.advance(25.0, Progress(window_started=39)) is None
    assert ph.advance(31.0, Progress(window_started=39)) == "tail"  # 3 × 10 s: closed on 39
    assert (ph.t_window_start, ph.t_window_end, ph.closed_by) == (1.0, 31.0, "time")

    ph = _opened(PhaseRules(warmup_s=1.0, window_s=10.0, min_window_requests=40))
    assert ph.advance(12.0, Progress(window_started=40)) == "tail"
    assert ph.closed_by == "time"


def test_a_counted_window_closes_on_its_sends_not_its_time():
    ph = _opened(PhaseRules(warmup_s=0.0, window_s=1.0, window_requests=20))
    assert ph.advance(50.0, Progress(window_started=19)) is None
    assert ph.advance(50.1, Progress(window_started=20)) == "tail"
    assert ph.closed_by == "count"


@pytest.mark.parametrize("tail, progress, left", [
    ("full", Progress(window_in_flight=3, window_no_first=1), 3),
    ("first_token", Progress(window_in_flight=3, window_no_first=1), 1),
    ("first_token", Progress(window_in_flight=3, window_no_first=0), 0),
    ("births", Progress(window_in_flight=3, window_no_first=0, window_live_births=(1.0, 2.0, 3.0)), 3),  # no births_s
])
def test_the_tail_waits_for_what_its_rule_names(tail, progress, left):
    ph = _opened(PhaseRules(warmup_s=0.0, window_s=5.0, tail=tail))
    assert ph.advance(5.0, Progress()) == "tail"
    assert ph.tail_left(progress) == left
    assert ph.advance(6.0, progress) == (None if left else "end")


def test_the_births_cutoff_is_decided_once_when_every_sender_knows_the_window_closed():
    rules = PhaseRules(warmup_s=0.0, window_s=20.0, tail="births", births_s=5.0, min_window_requests=2)
    ph = _opened(rules)
    assert ph.advance(20.0, Progress(window_started=30)) == "tail"
    births = [0.5 * k for k in range(40)]  # sends every 0.5 s through the window
    # A live worker may still send a window request before it hears the window closed: no cutoff yet.
    assert ph.advance(20.1, Progress(window_births=births[:10], tail_seen=False)) is None
    assert ph.t_births_end is None
    expect = births_cutoff(20.0, 5.0, births, 2)
    assert expect == 15.0
    # The request sent at 16 s is in flight but after the cutoff: the tail does not wait for it.
    late = Progress(window_in_flight=1, window_live_births=(16.0,), window_births=births)
    assert ph.advance(20.2, late) == "end"
    assert ph.t_births_end == expect
    # Decided once: later counts do not move it.
    assert ph.tail_left(Progress(window_births=births[:4])) == 0 and ph.t_births_end == expect

    ph = _opened(rules)
    ph.advance(20.0, Progress(window_started=30))
    early = Progress(window_in_flight=1, window_live_births=(14.0,), window_births=births)
    assert ph.advance(20.2, early) is None  # sent by the cutoff, still running: held
    assert ph.advance(20.3, Progress(window_no_first=1, window_births=births)) is None  # no first token yet


def test_a_decided_window_closes_at_once_and_a_stop_ends_where_it_stands():
    ph = _opened(PhaseRules(warmup_s=1.0, window_s=100.0))
    ph.decide_window(7.0)
    assert (ph.phase, ph.t_window_end, ph.closed_by) == ("tail", 7.0, "decided")
    ph.decide_window(8.0)  # only a window can be decided
    assert ph.t_window_end == 7.0

    ph = _opened(PhaseRules(warmup_s=1.0, window_s=100.0))
    ph.end_now(9.0)
    assert (ph.ended, ph.t_window_end, ph.closed_by) == (True, 9.0, "ended")
    assert ph.advance(200.0, WARM) is None  # ended stays ended

    ph = StepPhases(PhaseRules(warmup_s=1.0, window_s=100.0), 0.0)
    ph.end_now(0.5)  # stopped in the warm-up: no window at all
    assert ph.ended and ph.t_window_start is None and ph.t_window_end is None

    ph = _opened(PhaseRules(warmup_s=1.0, window_s=2.0))
    ph.advance(3.0, Progress())
    ph.end_now(4.0)  # in the tail: the window keeps its end
    assert ph.t_window_end == 3.0


def test_an_unknown_tail_rule_is_refused():
    with pytest.raises(ValueError, match="tail rule 'whole'"):
        PhaseRules(warmup_s=0.0, window_s=1.0, tail="whole")


@pytest.mark.parametrize("seed", range(20))
def test_phases_only_move_forward_and_the_window_lies_inside_the_step(seed):
    """Random counts on a random virtual timeline: whatever a transport reports, the phase never
    goes back, the window starts after the warm-up and ends after it starts, and a step whose
    counts all settle ends."""
    rng = random.Random(seed)
    rules = PhaseRules(warmup_s=rng.uniform(0, 5), window_s=rng.uniform(0.5, 10), warm_from_s=rng.uniform(0, 2),
                       min_window_requests=rng.randint(0, 50), max_window_factor=rng.choice([2.0, 20.0]),
                       tail=rng.choice(["full", "first_token", "births"]), births_s=rng.choice([None, 1.0, 3.0]))
    ph = StepPhases(rules, t_start=rng.uniform(0, 1000))
    order = ["warmup", "window", "tail", "end"]
    now, started = ph.t_start, 0
    for _ in range(5000):
        now += rng.expovariate(2.0)
        if ph.phase == "window":
            started += rng.randint(0, 3)
        settle = ph.phase == "tail" and rng.random() < 0.05
        p = Progress(warm=rng.random() < 0.3, window_started=started,
                     window_in_flight=0 if settle else rng.randint(0, 5), window_no_first=0 if settle else rng.randint(0, 2),
                     window_births=[ph.t_window_start or now] * started, tail_seen=rng.random() < 0.8)
        before = order.index(ph.phase)
        ph.advance(now, p)
        assert order.index(ph.phase) >= before
        if ph.ended:
            break
    assert ph.ended
    assert ph.t_window_start is not None and ph.t_window_end is not None
    assert ph.t_start + rules.warm_from_s + rules.warmup_s <= ph.t_window_start + 1e-9
    assert ph.t_window_start + rules.window_s <= ph.t_window_end + 1e-9


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_core_reads_no_clock_and_does_no_io():
    """What the core may import: the standard library's pure parts, the
    typed settings and documents, and itself. No time, no I/O, no threads, no processes, no
    sockets: a transport hands it `now` and its counts."""
    allowed = {"__future__", "dataclasses", "typing", "math", "bisect", "collections", "enum", "functools",
               "itertools", "statistics", "copy",
               "random",  # seeded generators only (the bootstrap, the window's subsample)
               "zlib",  # crc32 of a step's name: the bootstrap's seed
               "json"}  # a record's one line, as text (the file is kvtui.io.records')
    # the scenario's settings and the snapshot's documents: typed data, read, never written
    typed = {"kvtui.io.scenario.schema", "kvtui.io.snapshot.schema"}
    files = sorted((ROOT / "kvtui" / "core").glob("*.py"))
    assert files
    for f in files:
        bad = {m for m in _imports(f)
               if m.split(".")[0] not in allowed and not m.startswith("kvtui.core") and m not in typed}
        assert not bad, f"{f.relative_to(ROOT)} imports {sorted(bad)}"
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):  # random: seeded generators only
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "random":
                assert node.attr == "Random", f"{f.relative_to(ROOT)}:{node.lineno}: random.{node.attr} (unseeded)"


def test_both_transports_run_the_core_phases_and_neither_decides_them_itself():
    """The phase rules are written once: each transport builds a StepPhases, and the births cutoff
    is computed nowhere in kvtui/ but the core."""
    for rel in ("kvtui/runtime/load/generator.py", "kvtui/simulator/engine/continuous.py"):
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert "StepPhases(PhaseRules(" in text, rel
        assert "* max_window_factor" not in text and "* plan.max_window_factor" not in text, rel  # the old close
    callers = []
    for f in (ROOT / "kvtui").rglob("*.py"):
        if "births_cutoff(" in f.read_text(encoding="utf-8") and f.parent.name != "core":
            callers.append(str(f.relative_to(ROOT)))
    assert callers == []
