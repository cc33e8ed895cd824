"""What limited a step, on figures captured from a real H200 run."""

import json
import lzma
from pathlib import Path

from kvtui.core.evaluate import client_limited, limited_by
from kvtui.io.scenario.schema import Slo

DATA = Path(__file__).with_name("data")
# The published runs' requests, trimmed to the modes these tests judge (tests/fixtures/records/build.py)
RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def test_h200_c256_is_prefill_bound_not_client_bound():
    """On the H200 (vLLM 0.26, 2k/256, bf16) kvtui first called c=256 "client"-limited: a 61 ms
    loop-lag p99 against a 4.7 s TTFT p50 at 37 % client CPU. The prefill queue (166 waiting,
    KV 65 % used) is what failed the SLO."""
    step = json.loads((DATA / "h200_bf16_c256_step.json").read_text())
    assert step["limited_by"] == "client"  # what the first run said
    assert not client_limited(step["client"], step["ttft_ms"])
    step["client_limited"] = False
    slo = Slo(latency={"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0})
    assert limited_by(step, slo) == "prefill"


def test_saturated_or_lagging_client_is_flagged():
    ttft = {"p50": 100.0}
    assert client_limited({"cpu_share": 0.95}, ttft)
    assert client_limited({"cpu_share": 0.3, "loop_lag_ms_p99": 80.0}, ttft)
    assert client_limited({"cpu_share": 0.3, "dispatch_ms_p95": 30.0}, ttft)
    assert not client_limited({"cpu_share": 0.3, "loop_lag_ms_p99": 20.0, "dispatch_ms_p95": 1.0}, ttft)
    # Starved by the OS: a worker of bench/client_probe.py waited 12.8 s of 16.7 s on the run queue.
    assert client_limited({"cpu_share": 0.03, "wall_s": 16.7, "runq_wait_s": 12.8}, ttft)
    assert not client_limited({"cpu_share": 0.13, "wall_s": 7.0, "runq_wait_s": 0.37}, ttft)


def test_comparison_shows_each_gpus_peak_under_tensor_parallel():
    """Issue 10: with TP the comparison shows per-GPU peaks from the NVML series (rows of the
    real H200 run, with a second GPU added; no two-GPU machine was lent)."""
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.report.compare import compare_modes
    from kvtui.report.text import comparison_rows

    doc = load_snapshot(Path(__file__).parents[2] / "docs/results/h200-abc.json")
    doc.pop("comparison")
    assert compare_modes(doc)["rows"][0]["peak_gpu_mem_gib_per_gpu"] == [128.19]
    for row in doc["modes"][0]["series"]:
        if row.get("gpus"):
            row["gpus"] = row["gpus"] + [dict(row["gpus"][0], index=1, mem_used_gib=row["gpus"][0]["mem_used_gib"] - 1)]
    assert comparison_rows(doc)[0][5] == "128.2/127.2"


def test_preemptions_name_the_kv_wall_even_when_the_client_lagged():
    """A step of the frozen simulated L4 run (c=86): 10 preemptions and a full KV cache, but a
    271 ms loop-lag p99 made kvtui say "client". A lagging client cannot preempt: it is the
    wall (CI's starved CPU vLLM run hid its wall this way)."""
    doc = json.loads(lzma.decompress((Path(__file__).parents[1] / "tui/data/l4-demo.json.xz").read_bytes()))
    step = next(s for s in doc["modes"][0]["steps"] if s["load"] == 86.0)
    assert step["client_limited"] and step["limited_by"] == "client" and step["preemptions"] == 10
    slo = Slo(latency={"ttft_p95_ms": 5000.0, "tpot_p95_ms": 250.0})
    assert limited_by(step, slo) == "kv_wall"
    # Without server evidence of a full cache, the lagging client is still named.
    assert limited_by(dict(step, preemptions=0, kv_cache_usage_max=0.5), slo) == "client"


def test_a_closed_loop_in_lock_step_is_measured_on_the_real_h200_records():
    """H200, AWQ int4 + fp8 KV, fixed 2048/256: at c=192 one window's 192 requests were all sent
    within a second (TTFT p95 7.9 s, fail); the same load's repeats and c=160 were spread out."""
    from collections import defaultdict

    from kvtui.core.evaluate import LOCKSTEP, reevaluate, send_burst
    from kvtui.io.records import read_records
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.report.text import caveats

    root = Path(__file__).resolve().parents[2] / "docs" / "results"
    doc = load_snapshot(root / "h200-v2.json")
    awq = next(m for m in doc["modes"] if m["name"] == "awq-int4+fp8-kv")
    recs = defaultdict(list)
    for r in read_records(RECORDS / "h200-v2.records.jsonl"):
        if r.mode == awq["name"]:
            recs[r.step].append(r)
    slo = Slo(latency={"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0})
    by_load: dict[float, list[tuple[bool, float]]] = defaultdict(list)
    for st in awq["steps"]:
        if st.get("aborted"):
            continue
        counted = [r for r in recs[st["index"]] if r.counted]
        b = send_burst(counted, st["load"])
        new = reevaluate(st, recs[st["index"]], slo)
        assert new["send_burst"] == b and new["passed"] == st["passed"]
        by_load[st["load"]].append((st["passed"], b))
    # 192: the lock-step fail, its repeat, and (2026-11-30, the search continued on another GPU) a third pass.
    assert by_load[192.0][0] == (False, 1.0) and len(by_load[192.0]) == 3
    assert all(p is True and b < LOCKSTEP for p, b in by_load[192.0][1:])
    assert all(b < LOCKSTEP for _, b in by_load[160.0])
    assert [p for p, b in by_load[256.0]] == [False] and by_load[256.0][0][1] >= 0.75
    # The stored snapshot predates the field: re-evaluated steps carry it into the caveats.
    for st in awq["steps"]:
        if not st.get("aborted"):
            st["send_burst"] = send_burst([r for r in recs[st["index"]] if r.counted], st["load"])
    text = "\n".join(caveats(doc))
    assert "awq-int4+fp8-kv: the closed loop ran in lock-step at load" in text and "192 (100% of the slots sent within 1 s)" in text


def test_a_step_cut_by_a_stop_gets_no_verdict_on_the_real_h200_records():
    """H200, KV limited to 25 %, fp8 weights + fp8 KV: the device call's time limit (SIGINT)
    ended the knee's confirmation at c=198 mid-drain. Its in-flight requests were cancelled, so
    the 125 it counted were the early finishers, and the kvtui of then printed PASS for them.
    A cut step now carries no verdict, says why, and re-evaluating it (an SLO edit) keeps that."""
    from kvtui.cli.run import step_line
    from kvtui.core.evaluate import reevaluate
    from kvtui.io.records import read_records
    from kvtui.io.snapshot.file import load_snapshot

    root = Path(__file__).resolve().parents[2] / "docs" / "results"
    doc = load_snapshot(root / "h200-kvb-s1.json")  # as the first device session left it
    mode = next(m for m in doc["modes"] if m["name"] == "fp8-w+kv")
    step = mode["steps"][-1]
    assert step["aborted"] == "stopped by SIGINT" and step["passed"] is True and "cut" not in step
    recs = [r for r in read_records(RECORDS / "h200-kvb-s1.records.jsonl") if r.mode == "fp8-w+kv" and r.step == step["index"]]
    assert recs and any(r.error == "cancelled" for r in recs)
    slo = Slo(latency={"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0})
    as_measured = reevaluate(step, recs, slo)
    assert as_measured["passed"] is True  # what a verdict on the early finishers says
    cut = reevaluate(dict(step, cut=True), recs, slo)
    assert cut["passed"] is None and cut["cut"] is True
    assert cut["ttft_ms"]["p95"] == as_measured["ttft_ms"]["p95"]  # the figures stay, for the record
    line = step_line("fp8-w+kv", dict(cut, load=step["load"], why="confirm"), [])
    assert "CUT SHORT (stopped by SIGINT): no verdict" in line and "PASS" not in line
    assert reevaluate(cut, recs, slo)["passed"] is None


def test_an_slo_on_preemptions_moves_the_knee_to_where_the_cache_held_on_the_real_h200_records():
    """H200, KV limited to 25 %, fp8 KV: c=148 met the latency targets with ~0.23 preemptions per
    request (2,759 tok/s); c=132 had none (4,144 tok/s). `slo.max_preemptions_per_request = 0`
    asks for the knee without preemption: re-evaluated from the stored steps, only 132 passes."""
    from collections import defaultdict

    from kvtui.core.evaluate import reevaluate
    from kvtui.io.records import read_records
    from kvtui.io.scenario.loader import scenario_from_dict
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.tui.state import best_load, slo_of, slo_table

    root = Path(__file__).resolve().parents[2] / "docs" / "results"
    doc = load_snapshot(root / "h200-kvb.json")
    mode = next(m for m in doc["modes"] if m["name"] == "fp8-kv")
    recs = defaultdict(list)
    for r in read_records(RECORDS / "h200-kvb.records.jsonl"):
        if r.mode == "fp8-kv":
            recs[r.step].append(r)
    slo = scenario_from_dict({"slo": {"ttft_p95_ms": 2000, "tpot_p95_ms": 50, "max_preemptions_per_request": 0}}).slo
    assert slo.max_preemptions_per_request == 0.0 and "preemptions ≤ 0/request" in slo.describe()
    assert slo_of({"slo": slo_table(slo)}).max_preemptions_per_request == 0.0  # the TUI's SLO edit keeps it
    before = [(s["load"], s["passed"]) for s in mode["steps"]]
    after = [reevaluate(s, recs[s["index"]], slo) for s in mode["steps"]]
    assert best_load(mode["steps"]) == 148 and (148.0, True) in before
    assert best_load(after) == 132
    s148 = next(s for s in after if s["load"] == 148)
    check = next(c for c in s148["checks"] if c["target"] == "preemptions_per_request")
    assert s148["passed"] is False and s148["limited_by"] == "kv_wall" and check["ok"] is False and 0.2 < check["value"] < 0.3
    # Without the server's count there is nothing to judge: undecided, not a pass.
    s132 = next(s for s in mode["steps"] if s["load"] == 132)
    blind = reevaluate(dict(s132, preemptions=None), recs[s132["index"]], slo)
    assert blind["passed"] is None
