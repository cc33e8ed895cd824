"""The window opens only after every slot has finished a request at the step's load."""

from kvtui.explore.run import Run
from kvtui.io.records import read_records
from kvtui.io.scenario import load_scenario

from scenario_factory import knee_toml

SCENARIO = knee_toml("warm", knee=64, slowdown=None, workload={"prompt_tokens": 32, "output_tokens": 40, "jitter": 0.0},
                     ramp={"start": 8, "max": 8, "step": "8", "search": "linear", "confirm": False, "warmup_s": 0.1,
                           "window_s": 1},
                     slo={"tpot_p95_ms": 1000})


def test_window_waits_for_one_full_request_per_slot(tmp_path):
    """A request takes ~40 steps × 20 ms = 0.8 s, far beyond warmup_s = 0.1 s: the window must
    still open only after all 8 slots completed one (the H200 run once opened it at warmup_s,
    on the first wave of sends)."""
    p = tmp_path / "w.toml"
    p.write_text(SCENARIO)
    out = tmp_path / "w.json"
    doc = Run(load_scenario(p), out).run()
    step = doc["modes"][0]["steps"][0]
    recs = list(read_records(out.with_name("w.records.jsonl")))
    warm = [r for r in recs if r.phase == "warmup" and r.ok]
    first_done = {}
    for r in warm:
        first_done.setdefault(r.worker, []).append(r.t_last)
    window_sends = [r.t_sent for r in recs if r.phase == "window"]
    assert len(warm) >= 8  # each slot finished one
    assert min(window_sends) >= sorted(r.t_last for r in warm)[7]  # the 8th finished before the window opened
    assert step["requests"] >= 40
