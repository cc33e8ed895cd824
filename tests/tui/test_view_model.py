"""The view-model (kvtui.tui.state.RunState) on its own: fed events as a run sends them, no App."""

from __future__ import annotations

from types import SimpleNamespace

from kvtui.tui.options import AppOptions
from kvtui.tui.progress import progress
from kvtui.tui.state import RunState


def ev(kind, mode=None, data=None):
    return SimpleNamespace(kind=kind, mode=mode, data=data if data is not None else {})


def step(i, load, ok, t0):
    return {"index": i, "load": load, "passed": ok, "why": "search", "output_tok_s": 100.0 * load,
            "t_rel_start": t0, "t_rel_end": t0 + 10, "requests": 40, "ttft_ms": {"p95": 10.0 * load}}


def test_events_fill_the_view_model_and_its_answers():
    st = RunState()
    st.scenario = {"name": "vm", "ramp": {"start": 2, "max": 64, "confirm": True}, "workload": {}}
    st.ingest(ev("mode_starting", "a", {"settings": {}}))
    st.ingest(ev("engine_ready", "a", {"facts": {"weights_gib": 15.0}, "info": {"time_scale": 1.0}}))
    for t in range(0, 40, 2):
        st.ingest(ev("telemetry", "a", {"t": float(t), "gen_tok_s": 200.0,
                                         "gpus": [{"index": 0, "power_w": 300.0, "util_pct": 90.0, "sm_clock_mhz": 1500.0},
                                                  {"index": 1, "power_w": 310.0, "util_pct": 70.0, "sm_clock_mhz": 1400.0}]}))
    mv = st.modes["a"]
    # Power summed over the GPUs, utilisation and clock averaged: what the GPU panel shows.
    assert mv.series.last("gpu_power_w") == 610.0 and mv.series.last("gpu_util_pct") == 80.0
    assert mv.series.last("gpu_sm_clock_mhz") == 1450.0
    st.ingest(ev("step_started", "a", {"load": 2, "index": 0}))
    st.ingest(ev("step_finished", "a", step(0, 2, True, 0)))
    st.ingest(ev("step_finished", "a", step(1, 4, True, 10)))
    st.ingest(ev("step_started", "a", {"load": 8, "index": 2}))
    assert progress(st)["n"] == 3
    st.ingest(ev("step_finished", "a", step(2, 8, False, 20)))
    assert st.best(mv) == 4  # the knee rule: highest pass below the lowest fail
    st.ingest(ev("mode_finished", "a", {"best_concurrency": 4, "search": {"best": 4}, "complete": True}))
    assert mv.status == "done" and st.best(mv) == 4
    st.ingest(ev("run_finished", None, {"run": {"finished": True}, "modes": []}))
    assert st.status == "finished" and progress(st) is None


def test_options_decide_where_a_replay_opens():
    assert AppOptions().opens_on == "answer"
    assert AppOptions(replay_step=3).opens_on == "dashboard"
    assert AppOptions(view="dashboard").opens_on == "dashboard"


def test_the_quality_phase_shows_as_its_own_phase_with_its_figures():
    st = RunState()
    st.scenario = {"name": "vm", "ramp": {}, "workload": {}}
    st.ingest(ev("mode_starting", "a", {"settings": {}}))
    st.ingest(ev("engine_ready", "a", {"facts": {}, "info": {"time_scale": 1.0}}))
    from kvtui.explore.events import Log, QualityStarted

    # The phase comes from the typed event the run sends, not from the wording of a log line.
    st.ingest(Log("a", "[kvtui] quality phase for a (not counted in any step)"))
    assert st.modes["a"].phase != "quality"
    st.ingest(QualityStarted("a"))
    assert st.modes["a"].phase == "quality"
    st.ingest(ev("quality", "a", {"tasks": {"passkey": {"n": 24, "correct": 22, "accuracy": 22 / 24, "ci": [0.74, 0.98]},
                                            "agreement": {"n": 4, "outputs": []}},
                                  "suite": {"wall_s": 41.2}}))
    lines = [line for _m, line, _k in st.log]
    assert "quality passkey: 22/24 = 92% [74%–98%]" in lines
    assert "quality phase took 41 s (not counted in any step)" in lines
    assert st.modes["a"].phase == "ready"


def test_options_hand_the_app_a_loaded_snapshot_whether_given_a_path_or_a_document(tmp_path):
    # KvtuiApp reads `snapshot_doc`: a path is loaded by the snapshot loader (before, an app built
    # from unresolved options kept the path where a document was expected; mypy found it)
    import json

    from kvtui.io.snapshot.schema import SCHEMA

    doc = {"schema": SCHEMA, "modes": [], "scenario": {"name": "x"}}
    p = tmp_path / "run.json"
    p.write_text(json.dumps(doc))
    loaded = AppOptions(snapshot=p).snapshot_doc
    assert isinstance(loaded, dict) and loaded["scenario"] == {"name": "x"}
    assert AppOptions(snapshot=doc).snapshot_doc is doc and AppOptions().snapshot_doc is None
    assert AppOptions(snapshot=str(p)).resolved().snapshot == loaded


def test_a_reset_state_is_a_new_one():
    st = RunState()
    st.ingest(ev("mode_starting", "a", {"settings": {}}))
    st.status = "finished"
    st.reset()
    fresh = RunState()
    assert vars(st) == vars(fresh)


def test_the_step_in_flight_is_held_as_the_run_s_typed_events():
    """StepStarted and StepProgress reach the view-model as the events themselves (typed fields, a
    server's text made visible), from a typed event or an untyped one with the same payload."""
    from kvtui.explore import events

    st = RunState()
    st.ingest(events.StepStarted("a\x1b[2J", load=8, index=2, why="confirm"))
    assert isinstance(st.step, events.StepStarted) and (st.step.load, st.step.index, st.step.why) == (8, 2, "confirm")
    assert "\x1b" not in st.step.mode  # a control character from a name never reaches the screen raw
    st.ingest(ev("step_progress", "a", {"load": 8, "phase": "window", "elapsed_s": 3.5, "window_started": 12}))
    p = st.progress
    assert isinstance(p, events.StepProgress) and (p.phase, p.elapsed_s, p.window_started, p.completed) == (
        "window", 3.5, 12, 0)
    st.ingest(ev("step_finished", "a", step(2, 8, True, 0)))
    assert st.step is None and st.progress is None
