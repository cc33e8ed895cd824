"""`[ramp] load = "trace"` (docs/TRACES.md): an open-loop replay of a trace's own arrival times, each
step a speed-up factor. One schedule (kvtui.io.scenario.trace.replay_arrivals) that the simulator's
open-loop step (--fast) and the live load generator both send; the search finds each mode's largest
factor within the SLO and the answer says it in the user's words, with the GPUs the trace needs at 1×."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kvtui.io.scenario.loader import load_scenario
from kvtui.io.scenario.trace import (
    TraceSpec,
    aligned_counter,
    replay_arrivals,
    replay_rows,
    replay_schedule,
    summarize,
    trace_rate,
)
from kvtui.runtime.load.workload import PromptFactory, TokenSpace

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "200"}


def _pairs(seed: int = 3, n: int = 1500) -> list[tuple[float, int, int]]:
    """(seconds, input, output): lognormal inputs, outputs correlated with them, bursty arrivals
    (as tests/core/test_trace.py writes them)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(5.0) * (0.1 if rng.random() < 0.3 else 1.3)
        isl = max(1, min(3000, int(rng.lognormvariate(6.3, 0.7))))
        osl = max(1, min(900, int(isl * 0.15 * rng.uniform(0.5, 1.5)) + rng.randrange(1, 40)))
        out.append((round(t, 3), isl, osl))
    return out


def _mooncake(rows) -> str:
    out, nid = [], 10_000
    for k, (t, i, o) in enumerate(rows):
        nb = (i + 511) // 512
        shared = list(range(min(nb, k % 3)))  # requests share their first 0-2 blocks
        own = list(range(nid, nid + nb - len(shared)))
        nid += len(own)
        out.append(json.dumps({"timestamp": int(t * 1000), "input_length": i, "output_length": o,
                               "hash_ids": shared + own}))
    return "\n".join(out) + "\n"


def _own_jsonl(rows) -> str:
    return "".join(json.dumps({"time": t, "input_tokens": i, "output_tokens": o}) + "\n" for t, i, o in rows)


def _stats(xs: list[int]) -> tuple[float, float]:
    s = sorted(xs)
    pos = (len(s) - 1) * 0.95
    lo = int(pos)
    return sum(s) / len(s), s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


def _corr(a: list[int], b: list[int]) -> float:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


def _scenario(tmp: Path, trace: str | None, ramp: dict, engine: str = "sim", extra: str = "") -> Path:
    lines = ["[server]", f'engine = "{engine}"', 'gpu = "L4"', "max_model_len = 8192", "enable_prefix_caching = true",
             "[workload]"]
    if trace is not None:
        lines.append(f'trace = "{trace}"')
    lines.append("[ramp]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in ramp.items()]
    p = tmp / "sc.toml"
    p.write_text("\n".join(lines) + "\n" + extra)
    return p


@pytest.mark.parametrize("factor", [0.37, 1.0, 2.5, 8.0])
def test_the_schedule_replays_the_traces_rate_times_the_factor_and_its_pairs(tmp_path, factor):
    rows = _pairs(n=3000)
    (tmp_path / "t.jsonl").write_text(_own_jsonl(rows))
    sc = load_scenario(_scenario(tmp_path, "t.jsonl", {"load": "trace", "start": 0.5, "max": 8}))
    tr = replay_rows(TraceSpec.of(sc.workload))
    summ = summarize(TraceSpec.of(sc.workload))
    # a step 2.5 passes of the trace long: it wraps around at the end
    period = len(tr) / trace_rate(tr.t)
    duration = 2.5 * period / factor
    sched = replay_schedule(tr, factor, duration)
    assert sched == replay_schedule(tr, factor, duration)  # a pure function of its inputs
    rate = len(sched) / duration
    assert rate == pytest.approx(summ["mean_rate_rps"] * factor, rel=0.02)
    assert trace_rate(tr.t) == pytest.approx(summ["mean_rate_rps"], rel=1e-4)  # the summary rounds
    # the recorded gaps, divided by the factor, in the trace's order; the rows' pairs go with them
    for a, b in zip(sched[:50], sched[1:51]):
        assert b.at - a.at == pytest.approx((rows[b.row][0] - rows[a.row][0]) / factor, abs=2e-6)
    assert [a.row for a in sched[:3001]] == [*range(3000), 0]
    isl, osl = [a.isl for a in sched], [a.osl for a in sched]
    ti, to = [r[1] for r in rows], [r[2] for r in rows]
    for got, want in ((isl, ti), (osl, to)):
        (gm, gp), (wm, wp) = _stats(got), _stats(want)
        assert abs(gm - wm) <= 0.02 * wm and abs(gp - wp) <= 0.02 * wp
    assert abs(_corr(isl, osl) - _corr(ti, to)) < 0.02 and _corr(ti, to) > 0.5
    # a transport's request counter (an aligned base + k) builds exactly the row the schedule replays
    f = PromptFactory(sc.workload, TokenSpace.synthetic(), sc.server.max_model_len, salt=3)
    base = aligned_counter(1_000_123, len(tr))
    for a in sched[::397]:
        p = f.build(base + a.k)
        assert (len(p.ids), p.max_tokens) == (a.isl, a.osl)
    # a lazily read schedule is the same one; a worker's share starts at its own index
    lazy = replay_arrivals(tr, factor)
    assert [next(lazy) for _ in range(100)] == sched[:100]
    assert next(replay_arrivals(tr, factor, first=7)) == sched[7]


def test_the_simulators_open_loop_step_sends_the_schedule(tmp_path):
    from kvtui.simulator.engine.fastrun import OfflineServer

    rows = _pairs(n=400)
    (tmp_path / "mc.jsonl").write_text(_mooncake(rows))
    sc = load_scenario(_scenario(tmp_path, "mc.jsonl", {"load": "trace", "start": 0.5, "max": 4, "warmup_s": 1,
                                                          "window_s": 8}))
    srv = OfflineServer(sc, sc.modes[0], salt=5)
    res = srv.step(sc.modes[0].name, 0, 0.5, False, 12_345, 1)
    tr = replay_rows(TraceSpec.of(sc.workload))
    sched = replay_schedule(tr, 0.5, res.t_end - res.t_start + 1)
    recs = res.records
    assert len(recs) > 20
    base = aligned_counter(12_345, len(tr))
    for rec, a in zip(recs, sched):
        assert rec.id.endswith(f"-{base + a.k}")
        assert rec.t_intended - res.t_start == pytest.approx(a.at, abs=1e-9)
        assert (rec.expected_prompt_tokens, rec.expected_output_tokens) == (a.isl, a.osl)


def test_a_fast_headless_run_finds_each_modes_speed_up_and_every_export_carries_it(tmp_path):
    from kvtui.report.answer import answer_text

    out = tmp_path / "run.json"
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-trace-replay", "--headless", "--fast",
                        "--set", "ramp.window_s=5", "--out", str(out)],
                       capture_output=True, text=True, env=ENV, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads(out.read_text())
    steps = [s for m in doc["modes"] for s in m["steps"]]
    assert steps and all(s["load_kind"] == "trace" for s in steps)
    assert "trace×0.25" in p.stdout  # the step lines say the factor
    best = {r["mode"]: r["best"] for r in doc["comparison"]["rows"]}
    assert set(best) == {"bf16", "fp8-kv"} and all(b is not None for b in best.values())
    assert doc["comparison"]["load_kind"] == "trace"
    answer = p.stdout[p.stdout.index("ANSWER:"):]
    assert "serves your traffic at" in answer
    for mode, b in best.items():
        assert f"{b:.3g}×" in answer and f" in {mode}" in answer
        assert f"{mode} {math.ceil(1 / b - 1e-9)} GPU" in answer  # ceil(1 / factor) at 1×
    assert "GPUs your traffic needs at 1×" in answer
    text = answer_text(doc)  # what `kvtui replay` shows where the screen cannot (TERM=dumb)
    assert "serves your traffic at" in text and "max × trace @SLO" in text
    for fmt in ("md", "csv", "json"):
        e = subprocess.run([sys.executable, "-m", "kvtui", "export", "-f", fmt, "-o", "-", str(out)],
                           capture_output=True, text=True, env=ENV, timeout=120)
        assert e.returncode == 0, e.stderr
        if fmt == "md":
            assert "serves your traffic at" in e.stdout and "× the trace's recorded rate" in e.stdout
        elif fmt == "json":  # the portable snapshot
            port = json.loads(e.stdout)
            assert [(s["load_kind"], s["load"]) for m in port["modes"] for s in m["steps"]] == \
                [("trace", s["load"]) for s in steps]
        else:
            table = list(csv.DictReader(io.StringIO(e.stdout)))
            assert len(table) == len(steps) and all(t["load_kind"] == "trace" for t in table)
            assert {float(t["load"]) for t in table} == {s["load"] for s in steps}
    r = subprocess.run([sys.executable, "-m", "kvtui", "replay", str(out)], capture_output=True, text=True,
                       env={**ENV, "TERM": "dumb"}, timeout=120)
    assert r.returncode == 0 and "serves your traffic at" in r.stdout, r.stdout[-1500:] + r.stderr[-1500:]


def test_a_live_run_on_the_simulator_replays_the_trace_open_loop(tmp_path):
    from kvtui.io.records import read_records

    rows = _pairs(n=600)
    (tmp_path / "t.jsonl").write_text(_own_jsonl(rows))
    # the knee test model (a fixed pace): the step keeps the live client's own records (no modelled twin)
    sc = _scenario(tmp_path, "t.jsonl", {"load": "trace", "start": 8.0, "max": 8.0, "warmup_s": 1, "window_s": 2,
                                         "confirm": False, "processes": 2},
                   extra='[[modes]]\nname = "bf16"\nextra_args = ["--knee", "64", "--knee-tpot-ms", "2"]\n'
                         '[slo]\nttft_p95_ms = 60000\n')
    out = tmp_path / "o.json"
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", str(sc), "--headless", "--out", str(out)],
                       capture_output=True, text=True, env=ENV, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads(out.read_text())
    step = doc["modes"][0]["steps"][0]
    assert step["load_kind"] == "trace" and step["load"] == 8.0 and not step.get("modelled")
    assert "trace×8" in p.stdout
    recs = [r for r in read_records(Path(str(out).replace(".json", ".records.jsonl"))) if r.step == 0]
    assert len(recs) > 30
    # the live client sent the schedule: request counter base + k at its offset
    counters = sorted(int(r.id.rsplit("-", 1)[1]) for r in recs)
    base = counters[0]
    assert base % 600 == 0  # the aligned base: the trace's first row first
    tr = replay_rows(TraceSpec.of(load_scenario(sc).workload))
    sched = {a.k: a for a in replay_schedule(tr, 8.0, 60.0)}
    t0 = min(r.t_intended for r in recs) - sched[0].at
    for r in recs:
        a = sched[int(r.id.rsplit("-", 1)[1]) - base]
        assert r.t_intended - t0 == pytest.approx(a.at, abs=1e-6)
        assert (r.expected_prompt_tokens, r.expected_output_tokens) == (a.isl, a.osl)
    assert {r.worker for r in recs} == {0, 1}  # both workers sent their share


@pytest.mark.parametrize("ramp, trace, words", [
    ({"load": "trace"}, None, ["ramp.load", 'set [workload] trace = "FILE"']),
    ({"load": "trace", "start": 0.001, "max": 2}, "t.jsonl", ["ramp.start", "[0.01, 1000]"]),
    ({"load": "trace", "start": 1, "max": 5000}, "t.jsonl", ["ramp.max", "[0.01, 1000]"]),
    ({"load": "trace", "start": 1, "max": 2}, "one.jsonl", ["ramp.load", "3 row(s) have none to replay"]),
])
def test_a_bad_trace_ramp_is_refused_with_one_line_and_exit_2(tmp_path, ramp, trace, words):
    (tmp_path / "t.jsonl").write_text(_own_jsonl(_pairs(n=50)))
    (tmp_path / "one.jsonl").write_text(_own_jsonl([(5.0, 100, 10)] * 3))  # three rows, one instant
    sc = _scenario(tmp_path, trace, ramp)
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", str(sc), "--headless", "--fast", "--out",
                        str(tmp_path / "o.json")], capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 2, p.stdout[-1000:] + p.stderr[-1000:]
    err = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and "sc.toml" in err[0] and all(w in err[0] for w in words), err
    assert not (tmp_path / "o.json").exists()


def test_each_pass_over_the_trace_has_its_own_blocks(tmp_path):
    """A step replays from the first row; a later step (a new pass: counter // N) must not send the
    earlier pass's prompts again, which any prefix cache would serve whole. Within a pass, the trace's
    sharing stays exactly."""
    rows = _pairs(n=300)
    (tmp_path / "mc.jsonl").write_text(_mooncake(rows))
    sc = load_scenario(_scenario(tmp_path, "mc.jsonl", {"load": "trace", "start": 0.5, "max": 4}))
    f = PromptFactory(sc.workload, TokenSpace.synthetic(), sc.server.max_model_len, salt=7)
    k1, k2 = [k for k in range(1, 300, 3) if rows[k][1] >= 1100][:2]  # both share their first 512-token block
    for lap in (0, 1, 5):
        a, b = f.build(lap * 300 + k1).ids, f.build(lap * 300 + k2).ids
        assert a is not None and b is not None and a[:512] == b[:512]
    assert f.build(k1).ids[:512] != f.build(300 + k1).ids[:512]


def test_a_worker_uses_the_rows_the_parent_read(tmp_path):
    """The parent reads the trace once and hands the rows to each load-generator worker: a worker's
    prompt factory builds from them without opening the file."""
    rows = _pairs(n=200)
    (tmp_path / "t.jsonl").write_text(_own_jsonl(rows))
    sc = load_scenario(_scenario(tmp_path, "t.jsonl", {"load": "trace", "start": 0.5, "max": 4}))
    tr = replay_rows(TraceSpec.of(sc.workload))
    (tmp_path / "t.jsonl").unlink()  # a worker that read the file again would fail here
    sc.workload.trace = str(tmp_path / "gone.jsonl")
    f = PromptFactory(sc.workload, TokenSpace.synthetic(), sc.server.max_model_len, salt=3, trace_rows=tr)
    assert [f.lengths(k) for k in range(5)] == [(i, o) for _, i, o in rows[:5]]


@pytest.mark.parametrize("rows, words", [
    ([{"mode": "bf16", "best": 1.4}, {"mode": "fp8-w+kv", "best": 2.3}],
     ["serves your traffic at 2.3× its recorded rate in fp8-w+kv, 1.4× in bf16", "fp8-w+kv 1 GPU;", "bf16 1 GPU"]),
    ([{"mode": "bf16", "best": 0.3}, {"mode": "fp8", "best": 16, "best_lower_bound": True}],
     ["at ≥ 16× its recorded rate in fp8, 0.3× in bf16", "fp8 ≤ 1 GPU;", "bf16 4 GPUs"]),
    ([{"mode": "bf16", "best": 0.25, "best_lower_bound": True, "usd_per_mtok_out": 1.5}],
     ["at ≥ 0.25× its recorded rate in bf16", "bf16 ≤ 4 GPUs ($1.500/Mtok out)"]),
])
def test_the_answer_says_the_factor_and_the_gpus_at_1x_honestly(rows, words):
    from kvtui.report.answer import traffic_questions

    text = " | ".join(q["text"] for q in traffic_questions(rows, {"cost": {"gpus": 1}}))
    assert all(w in text for w in words), text
    two = traffic_questions(rows[:1], {"cost": {"gpus": 2}})
    assert "this 2-GPU server" in two[0]["text"]
