"""The prediction under an SLO that the window alone judges (TTFT and ITL, no TPOT or E2E).

Such a step ends at its window's first tokens and hands its requests on to the next step
(docs/PROTOCOL.md, the tail rule). Two defects met on the 8k-in / 512-out workload of
scripts/h200_answer.sh, both on the offline simulator that the prediction runs:

- the prediction judged its continuous steps as complete requests only, so the requests carried
  on into the next step were missing from TTFT, every step read "undecided", and the prediction
  said "knee none, next 8 fails" where the measured knee was 103;
- where no E2E was known yet, it ran a classic pilot step on a server still holding the last
  continuous step's requests: KeyError on their first token ("the prediction failed").
"""

from __future__ import annotations

from pathlib import Path

from kvtui.explore.prediction import PREDICT_SALT, Simulator
from kvtui.io.scenario import load_scenario
from kvtui.simulator.engine.fastrun import OfflineServer
from kvtui.simulator.model.calibration_file import read_calibration

# judged by TTFT and ITL only (no TPOT or E2E: the window alone decides), cheap steps
WINDOW_SLO = """
name = "window-slo"
seed = 0
[server]
engine = "sim"
model = "llama-3.1-8b"
gpu = "H200"
max_model_len = 4096
[[modes]]
name = "bf16"
dtype = "bfloat16"
[workload]
prompt_tokens = 2048
output_tokens = 64
[ramp]
start = 8
max = 256
search = "auto"
warmup_s = 1
window_s = 4
resolution = 8
[slo]
ttft_p95_ms = 2000
itl_p95_ms = 200
"""


def _scenario(tmp_path: Path):
    f = tmp_path / "window-slo.toml"
    f.write_text(WINDOW_SLO)
    return load_scenario(f)


def test_an_itl_slo_is_predicted_from_the_windows_own_figures(tmp_path):
    sc = _scenario(tmp_path)
    assert {m for m, _, _ in sc.slo.targets()} >= {"ttft", "itl"} and "tpot" not in {m for m, _, _ in sc.slo.targets()}
    sim = Simulator(sc, sc.modes[0], read_calibration(None), True)
    first = sim.step(8)
    assert first["passed"] is True, first.get("checks")  # light load: decided, and a pass
    ttft = next(c for c in first["checks"] if c["target"] == "ttft_p95_ms")
    assert ttft["value"] is not None and ttft["n"] >= 20
    second = sim.step(16)  # after a continuous step that handed requests on
    assert second["passed"] is True, second.get("checks")


def test_a_classic_step_after_a_continuous_one_starts_from_an_idle_server(tmp_path):
    sc = _scenario(tmp_path)
    srv = OfflineServer(sc, sc.modes[0], PREDICT_SALT)
    plan = srv.plan(16, 20, "first", "first_token", None, None)
    res, _info, counter = srv.continuous_step("bf16", 0, 0, plan)
    carried = [r for r in res.records if r.error == "cancelled"]
    held = len(srv._client.live) + len(srv._client.ingest)
    assert held > 0  # the continuous step handed requests on
    res2 = srv.step("bf16", 1, 16, True, counter, 20)  # the classic pilot: raised KeyError before
    assert any(r.ok for r in res2.records)
    released = srv.release_records()
    assert len(released) >= held and all(r.error == "cancelled" for r in released)
    assert not srv._client.live and not srv._client.ingest
    assert carried is not None


def test_the_prediction_under_a_window_slo_names_a_knee(tmp_path):
    sc = _scenario(tmp_path)
    from kvtui.explore.prediction import predict_mode

    p = predict_mode(sc, sc.modes[0], read_calibration(None))
    assert p["covered"], p.get("why")
    assert p["knee"] is not None and p["knee"] >= 8, {k: p.get(k) for k in ("knee", "first_fail", "why")}
