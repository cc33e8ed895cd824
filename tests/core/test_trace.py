"""[workload] trace (kvtui/io/scenario/trace.py, docs/TRACES.md): each layout read by its own columns,
compressed or not, a bad row refused naming FILE:LINE, a window or row range chosen, the summary kept
in the snapshot, and the replay: request k takes row k's (input, output) pair jointly and its prefix
blocks, in the prompt factory every protocol draws from (the live load generator, --fast)."""

from __future__ import annotations

import gzip
import json
import lzma
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kvtui.errors import ScenarioError, UsageError
from kvtui.io.scenario.loader import load_scenario
from kvtui.io.scenario.trace import TraceSpec, describe, summarize
from kvtui.runtime.load.workload import PromptFactory, TokenSpace

ROOT = Path(__file__).resolve().parents[2]
N = 1500


def _pairs(seed: int = 3, n: int = N) -> list[tuple[float, int, int]]:
    """(seconds, input, output): lognormal inputs, outputs correlated with them, bursty arrivals."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(5.0) * (0.1 if rng.random() < 0.3 else 1.3)
        isl = max(1, min(3000, int(rng.lognormvariate(6.3, 0.7))))
        osl = max(1, min(900, int(isl * 0.15 * rng.uniform(0.5, 1.5)) + rng.randrange(1, 40)))
        out.append((round(t, 3), isl, osl))
    return out


def _azure(rows) -> str:
    from datetime import datetime, timedelta

    t0 = datetime(2023, 11, 16, 18, 15, 46)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"{(t0 + timedelta(seconds=t)).strftime('%Y-%m-%d %H:%M:%S.%f')}0,{i},{o}" for t, i, o in rows]
    return "\n".join(lines) + "\n"


def _burstgpt(rows, failed: int = 0) -> str:
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for k, (t, i, o) in enumerate(rows):
        lines.append(f"{t:.3f},ChatGPT,{i},{o},{i + o},Conversation log")
        if k < failed:  # a failed request: 0 response tokens
            lines.append(f"{t:.3f},GPT-4,{i},0,{i},Conversation log")
    return "\n".join(lines) + "\n"


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


def _own_csv(rows) -> str:
    lines = ["arrived_ms,in_tok,out_tok,conv"]
    lines += [f"{int(t * 1000)},{i},{o},c{k % 50}" for k, (t, i, o) in enumerate(rows)]
    return "\n".join(lines) + "\n"


def _own_jsonl(rows) -> str:
    return "".join(json.dumps({"time": t, "input_tokens": i, "output_tokens": o}) + "\n" for t, i, o in rows)


LAYOUTS = {
    "azure": ("trace.csv", _azure, {}),
    "burstgpt": ("burst.csv", _burstgpt, {}),
    "mooncake": ("mc.jsonl", _mooncake, {}),
    "csv": ("mine.csv", _own_csv, {"trace_columns": {"time": "arrived_ms", "input": "in_tok", "output": "out_tok",
                                                      "session": "conv", "time_unit": "ms"}}),
    "jsonl": ("mine.jsonl", _own_jsonl, {}),
}


def _scenario(tmp: Path, trace: str, max_model_len: int = 8192, **workload) -> Path:
    w = {"trace": trace, **workload}
    lines = ["[server]", 'engine = "sim"', 'gpu = "L4"', f"max_model_len = {max_model_len}", "[workload]"]
    for k, v in w.items():
        if isinstance(v, dict):
            lines.append(f"{k} = {{{', '.join(f'{a} = {json.dumps(b)}' for a, b in v.items())}}}")
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    p = tmp / "sc.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _stats(xs: list[int]) -> tuple[float, float]:
    s = sorted(xs)
    pos = (len(s) - 1) * 0.95
    lo = int(pos)
    p95 = s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)
    return sum(s) / len(s), p95


def _corr(a: list[int], b: list[int]) -> float:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_layout_replays_the_traces_pairs_jointly(tmp_path, layout):
    name, write, extra = LAYOUTS[layout]
    rows = _pairs()
    (tmp_path / name).write_text(write(rows))
    sc = load_scenario(_scenario(tmp_path, name, **extra))
    summ = summarize(TraceSpec.of(sc.workload))
    assert summ["layout"] == layout and summ["rows"] == N
    f = PromptFactory(sc.workload, TokenSpace.synthetic(), sc.server.max_model_len, salt=7)
    isl, osl = [], []
    for k in range(N):
        p = f.build(k)
        isl.append(len(p.ids))
        osl.append(p.max_tokens)
    ti, to = [r[1] for r in rows], [r[2] for r in rows]
    for got, want in ((isl, ti), (osl, to)):
        (gm, gp), (wm, wp) = _stats(got), _stats(want)
        assert abs(gm - wm) <= 0.02 * wm and abs(gp - wp) <= 0.02 * wp
    assert abs(_corr(isl, osl) - _corr(ti, to)) < 0.02  # the pairs, not two independent marginals
    assert _corr(ti, to) > 0.5
    # The summary's own figures are the trace's
    assert summ["input_tokens"]["mean"] == pytest.approx(sum(ti) / N, abs=0.006)
    assert summ["input_tokens"]["p95"] == pytest.approx(_stats(ti)[1], rel=1e-9)
    assert summ["percentiles"] == "exact"
    assert summ["duration_s"] == pytest.approx(rows[-1][0] - rows[0][0], abs=2e-3)
    assert summ["mean_rate_rps"] == pytest.approx((N - 1) / (rows[-1][0] - rows[0][0]), rel=1e-3)
    assert summ["interarrival_cv"] > 1.0  # bursty arrivals, as written
    # The typical request everything else reasons about (KV-bound guess, simulator) is the trace's
    assert sc.workload.prompt_tokens.dist == "trace" and sc.workload.prompt_tokens.mean == pytest.approx(sum(ti) / N,
                                                                                                         abs=0.01)


def test_fast_simulator_draws_the_same_rows(tmp_path):
    from kvtui.simulator.engine.fastrun import OfflineServer

    rows = _pairs(n=300)
    (tmp_path / "mc.jsonl").write_text(_mooncake(rows))
    sc = load_scenario(_scenario(tmp_path, "mc.jsonl"), overrides=["server.enable_prefix_caching=true"])
    srv = OfflineServer(sc, sc.modes[0], salt=5)
    got = [srv._sample(k)[:2] for k in range(300)]
    assert got == [(i, o) for _, i, o in rows]
    # hash_ids become the same blocks: two requests with k % 3 == 1 share their first 512 tokens only
    k1, k2 = [k for k in range(1, 300, 3) if rows[k][1] >= 1100][:2]
    a, b = srv._sample(k1)[2], srv._sample(k2)[2]
    assert a[:32] == b[:32] and a[32:64] != b[32:64]  # 512 tokens = 32 blocks of 16


def test_prefix_blocks_have_exactly_the_traces_sharing(tmp_path):
    lines = [json.dumps({"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2, 3]}),
             json.dumps({"timestamp": 10, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 9]}),
             json.dumps({"timestamp": 20, "input_length": 700, "output_length": 5, "hash_ids": [7, 2]})]
    (tmp_path / "mc.jsonl").write_text("\n".join(lines) + "\n")
    sc = load_scenario(_scenario(tmp_path, "mc.jsonl"))
    f = PromptFactory(sc.workload, TokenSpace.synthetic(), 8192, salt=1)
    a, b, c = (f.build(k).ids for k in range(3))
    assert (len(a), len(b), len(c)) == (1200, 1100, 700)
    assert a[:1024] == b[:1024] and a[1024:1100] != b[1024:1100]  # blocks 1, 2 shared; 3 vs 9 not
    assert c[:512] != a[:512] and c[512:700] == a[512:700]  # block 2 after 7: the same tokens (chained ids)
    assert f.build(0).ids == a  # deterministic
    other = PromptFactory(sc.workload, TokenSpace.synthetic(), 8192, salt=2).build(0).ids
    assert other[:512] != a[:512]  # another run's salt: no sharing across runs
    summ = summarize(TraceSpec.of(sc.workload))
    assert summ["prefix_shared"] == pytest.approx((1024 + 188) / (1200 + 1100 + 700), abs=1e-4)
    # the chat API: the same blocks as words, one token each
    sc.workload.api = "chat"
    fc = PromptFactory(sc.workload, TokenSpace.synthetic(), 8192, salt=1)
    ca, cb = (fc.build(k).messages[0]["content"].split() for k in range(2))
    assert len(ca) == 1200 and ca[:1024] == cb[:1024] and ca[1024:1100] != cb[1024:1100]


def test_a_session_shares_its_earlier_prompt(tmp_path):
    (tmp_path / "s.csv").write_text("timestamp,input_tokens,output_tokens,session_id\n0,300,5,a\n1,200,5,b\n"
                                    "2,800,5,a\n3,100,5,\n")
    sc = load_scenario(_scenario(tmp_path, "s.csv"))
    f = PromptFactory(sc.workload, TokenSpace.synthetic(), 8192, salt=1)
    a1, b1, a2, none = (f.build(k).ids for k in range(4))
    assert a2[:300] == a1 and a2[300:] != a1[:500] and b1[:50] != a1[:50] and len(none) == 100
    assert f.shares_prefixes
    assert summarize(TraceSpec.of(sc.workload))["prefix_shared"] == pytest.approx(300 / 1400, abs=1e-4)


def test_burstgpt_failed_requests_are_skipped_and_counted(tmp_path):
    (tmp_path / "b.csv").write_text(_burstgpt(_pairs(n=100), failed=7))
    s = summarize(TraceSpec(str(tmp_path / "b.csv")))
    assert (s["rows"], s["skipped"], s["rows_read"]) == (100, 7, 107)
    assert "failed" in s["skipped_why"] and "7 skipped (failed requests" in describe(s)[0]


@pytest.mark.parametrize("kind", ["gz", "xz", "zst"])
def test_compressed_traces_read_as_plain(tmp_path, kind):
    text = _azure(_pairs(n=400)).encode()
    (tmp_path / "plain.csv").write_bytes(text)
    if kind == "gz":
        data = gzip.compress(text)
    elif kind == "xz":
        data = lzma.compress(text)
    else:
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor().compress(text)
    (tmp_path / f"t.csv.{kind}").write_bytes(data)
    a, b = summarize(TraceSpec(str(tmp_path / "plain.csv"))), summarize(TraceSpec(str(tmp_path / f"t.csv.{kind}")))
    assert {k: v for k, v in a.items() if k not in ("file", "path")} == {k: v for k, v in b.items()
                                                                         if k not in ("file", "path")}
    # a truncated compressed file is refused, not read short
    (tmp_path / f"cut.csv.{kind}").write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match=r"cut\.csv\." + kind):
        summarize(TraceSpec(str(tmp_path / f"cut.csv.{kind}")))


@pytest.mark.parametrize("text,line,words", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,5\n2023-11-16 18:00:01,ten,5\n", 3,
     "ContextTokens must be a whole number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,5\n\n2023-11-16 18:00:01,10\n", 4,
     "2 fields, the header has 3"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:05,10,5\n2023-11-16 18:00:01,10,5\n", 3,
     "the time goes back"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n", 2, "ISO date"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1]}\n{"timestamp": 1, "input_length": 5\n',
     2, "not JSON"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": 1, "input_length": -5, '
     '"output_length": 5}\n', 2, "input_length must be from 0"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": ["x"]}\n', 1, "hash_ids must be a list"),
    ("when,prompt,reply\n0,5,5\n", 1, "no input tokens column"),
])
def test_a_bad_row_is_refused_naming_file_and_line(tmp_path, text, line, words):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ScenarioError) as e:
        load_scenario(_scenario(tmp_path, "bad.csv"))
    assert f"bad.csv:{line}: " in str(e.value) and words in str(e.value) and "\n" not in str(e.value)
    assert e.value.exit_code == 2


def test_the_cli_refuses_a_bad_trace_with_one_line_and_exit_2(tmp_path):
    (tmp_path / "bad.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,x\n")
    sc = _scenario(tmp_path, "bad.csv")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", str(sc), "--headless", "--fast", "--out",
                        str(tmp_path / "o.json")], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2, p.stderr
    err = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and "bad.csv:2: GeneratedTokens" in err[0]
    assert not (tmp_path / "o.json").exists()


def test_a_window_and_a_row_range_choose_part_of_the_trace(tmp_path):
    rows = [(float(k), 100 + k, 10 + k) for k in range(100)]  # one row a second
    (tmp_path / "t.jsonl").write_text(_own_jsonl(rows))
    sc = load_scenario(_scenario(tmp_path, "t.jsonl", trace_start_s=20.0, trace_end_s=30.0))
    f = PromptFactory(sc.workload, TokenSpace.synthetic(), 8192, salt=1)
    assert [f.lengths(k) for k in range(11)] == [(120 + k, 30 + k) for k in range(10)] + [(120, 30)]
    sc = load_scenario(_scenario(tmp_path, "t.jsonl", trace_skip_rows=90, trace_rows=5))
    s = summarize(TraceSpec.of(sc.workload))
    assert (s["rows"], s["input_tokens"]["max"], s["selection"]) == (5, 194, "rows 91–95")
    with pytest.raises(ScenarioError, match="no replayable row"):
        load_scenario(_scenario(tmp_path, "t.jsonl", trace_start_s=500.0))
    with pytest.raises(ScenarioError, match="trace_end_s: must be > trace_start_s"):
        load_scenario(_scenario(tmp_path, "t.jsonl", trace_start_s=50.0, trace_end_s=10.0))


def test_scenario_fields_are_checked(tmp_path):
    (tmp_path / "t.jsonl").write_text(_own_jsonl(_pairs(n=20)))
    with pytest.raises(ScenarioError, match="trace_columns.inputs: unknown key"):
        load_scenario(_scenario(tmp_path, "t.jsonl", trace_columns={"inputs": "x"}))
    with pytest.raises(ScenarioError, match="the column 'nope' named in trace_columns is absent"):
        load_scenario(_scenario(tmp_path, "t.jsonl", trace_columns={"input": "nope"}))
    with pytest.raises(ScenarioError, match="trace_format = 'mooncake', but the first row lacks"):
        load_scenario(_scenario(tmp_path, "t.jsonl", trace_format="mooncake"))
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(_scenario(tmp_path, "absent.csv"))
    with pytest.raises(ScenarioError, match="turns must be 1 with a trace"):
        load_scenario(_scenario(tmp_path, "t.jsonl", turns=2))
    # A longer row than the context: a warning, and its prompt cut to fit
    (tmp_path / "long.jsonl").write_text(_own_jsonl([(0.0, 9000, 100), (1.0, 50, 10)]))
    sc = load_scenario(_scenario(tmp_path, "long.jsonl", max_model_len=4096))
    assert any("4,096" in w and "cut to fit" in w for w in sc.warnings)
    isl, osl = PromptFactory(sc.workload, TokenSpace.synthetic(), 4096, salt=1).lengths(0)
    assert isl + osl <= 4096 and osl == 100


def test_the_summary_is_printed_first_and_kept_in_the_snapshot(tmp_path):
    from kvtui.io.snapshot.file import load_snapshot

    out = tmp_path / "run.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-trace", "--headless", "--fast", "--mode", "bf16",
                        "--set", "ramp.start=8", "--set", "ramp.max=8", "--set", "ramp.window_s=4",
                        "--set", "ramp.confirm=false", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    lines = p.stdout.splitlines()
    first_trace = next(i for i, x in enumerate(lines) if x.startswith("kvtui: trace demo-mooncake.jsonl.zst"))
    first_mode = next(i for i, x in enumerate(lines) if x.startswith("== mode"))
    assert first_trace < first_mode and "2,000 rows" in lines[first_trace]
    assert any("prefix hit" in x for x in lines[first_mode:])
    doc = load_snapshot(out)
    t = doc["trace"]
    assert t["layout"] == "mooncake" and t["rows"] == 2000 and 0.5 < t["prefix_shared"] < 0.95
    assert set(t["input_tokens"]) >= {"p50", "p95", "p99"} and t["interarrival_cv"] > 1
    assert doc["modes"][0]["steps"][0]["prefix_cache_hit_rate"] is not None
    from kvtui.report.text import caveats

    assert any("the trace's own prompt sharing: an unbounded cache would hit" in c for c in caveats(doc))


def test_the_simulator_shows_fp8_kv_raising_the_hit_rate_where_the_cache_binds():
    from kvtui.simulator.engine.fastrun import OfflineServer, step_metrics

    sc = load_scenario("sim-trace", overrides=["ramp.warmup_s=5", "ramp.window_s=40"])
    hits = {}
    for mode in sc.modes:
        srv = OfflineServer(sc, mode, salt=3)
        hits[mode.name] = step_metrics(srv.step(mode.name, 0, 16, True, 0, 20))["prefix_cache_hit_rate"]
    assert hits["bf16"] is not None and hits["fp8-kv"] > hits["bf16"] + 0.03, hits
    # ...and both below what an unbounded cache would hit (the trace's own shared share)
    assert hits["fp8-kv"] < summarize(TraceSpec.of(sc.workload))["prefix_shared"]


def test_the_shared_share_stays_bounded_and_says_when_it_is_a_lower_bound(tmp_path, monkeypatch):
    import kvtui.io.scenario.trace as tr

    monkeypatch.setattr(tr, "MAX_SEEN", 3)
    (tmp_path / "s.csv").write_text("timestamp,input_tokens,output_tokens,session_id\n"
                                    + "".join(f"{k},100,5,s{k % 5}\n" for k in range(20)))
    s = tr.summarize(TraceSpec(str(tmp_path / "s.csv")))
    assert s["prefix_shared"] == pytest.approx(15 * 100 / 2000 * 3 / 5, abs=1e-9)  # only 3 sessions remembered
    assert "lower bound" in s["prefix_note"]
    # dense Mooncake ids: a bitmap, exact however many
    lines = [json.dumps({"timestamp": k, "input_length": 1024, "output_length": 1, "hash_ids": [k % 4, 100 + k]})
             for k in range(40)]
    (tmp_path / "m.jsonl").write_text("\n".join(lines))
    s = tr.summarize(TraceSpec(str(tmp_path / "m.jsonl")))
    assert s["prefix_shared"] == pytest.approx(36 * 512 / (40 * 1024)) and "prefix_note" not in s


def test_the_tui_logs_the_summary_when_the_run_starts(tmp_path):
    from types import SimpleNamespace

    from kvtui.tui.state import RunState

    (tmp_path / "t.jsonl").write_text(_own_jsonl(_pairs(n=50)))
    summ = summarize(TraceSpec(str(tmp_path / "t.jsonl")))
    st = RunState()
    doc = {"scenario": {"name": "t", "workload": {}}, "environment": {}, "run": {"modes_requested": []}, "modes": [],
           "trace": summ}
    st.ingest(SimpleNamespace(kind="run_started", mode=None, data=doc))
    lines = [line for _, line, _ in st.log]
    assert lines[:2] == [f"kvtui: {x}" for x in describe(summ)[:2]] and "50 rows" in lines[0]


def test_bom_crlf_and_a_trace_without_times(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                                     b"2024-05-10 00:00:00.009930+00:00,100,5\r\n2024-05-10 00:00:01.009930+00:00,200,7\r\n")
    s = summarize(TraceSpec(str(tmp_path / "a.csv")))
    assert (s["layout"], s["rows"], s["duration_s"]) == ("azure", 2, 1.0)
    (tmp_path / "n.csv").write_text("in,out\n5,6\n7,8\n")
    sc = load_scenario(_scenario(tmp_path, "n.csv", trace_columns={"input": "in", "output": "out"}))
    s = summarize(TraceSpec.of(sc.workload))
    assert s["mean_rate_rps"] is None and "no arrival times (lengths only)" in describe(s)[0]
    assert PromptFactory(sc.workload, TokenSpace.synthetic(), 8192, salt=1).lengths(1) == (7, 8)
