"""The headless run ends with the answer's lines, then a table that fits the terminal; --json is the
answer for scripts, alone on stdout, and it is the snapshot's answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kvtui.commands.headless_print import answer_json
from kvtui.report.fit_table import fit
from kvtui.snapshot.file import load_snapshot


def _run(tmp_path, *args, columns=80):
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-demo", "--fast", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": str(columns)})
    assert r.returncode == 0, r.stderr[-2000:]
    return r, load_snapshot(out)


def test_the_ending_at_80_columns_is_the_answer_then_a_table_that_fits(tmp_path):
    r, doc = _run(tmp_path, "--headless")
    ending = r.stdout[r.stdout.index("ANSWER:"):]
    # a path alone on its line stays whole (copyable); nothing else passes 80 columns
    long = [line for line in ending.splitlines() if len(line) > 80 and " " in line.strip()]
    assert not long, long
    ans = answer_json(doc)
    assert f"ANSWER: {ans['headline']}" in ending
    for q in ans["questions"]:
        assert q["question"] in ending  # the winner per question
    table = ending[ending.index("Modes vs baseline"):]
    assert "mode" in table and "×" in table and "not shown:" in table  # the rest named, behind --wide
    assert "q-adj $/Mtok" not in table.split("not shown:")[0]  # an empty column is dropped


def test_wide_prints_every_column(tmp_path):
    r, _ = _run(tmp_path, "--headless", "--wide")
    assert "q-adj $/Mtok out" in r.stdout and "not shown:" not in r.stdout


def test_json_is_the_snapshots_answer_and_alone_on_stdout(tmp_path):
    r, doc = _run(tmp_path, "--json")
    parsed = json.loads(r.stdout)  # nothing else on stdout, or this fails
    assert parsed == json.loads(json.dumps(answer_json(doc), default=str))
    assert parsed["questions"][0]["winners"] and parsed["headline"]
    assert "snapshot" in r.stderr


def test_fit_keeps_the_mode_and_drops_by_priority():
    headers = ["mode", "max conc @SLO", "×", "quality", "$/Mtok in", "Δ"]
    rows = [["bf16", "11", "1.00×", "—", "0.1140", "+0.0%"], ["fp8-kv", "16", "1.46×", "—", "0.0933", "-18.2%"]]
    h, r, dropped = fit(headers, rows, 30)
    assert h[0] == "mode" and "quality" not in h  # empty: dropped, not named
    assert dropped == ["$/Mtok in"] and "Δ" not in h  # its Δ went with it
    assert fit(headers, rows, 30, wide=True)[0] == headers


def test_verdict_words_agree_with_themselves():
    from kvtui.report.text import verdict_words

    ok = {"passed": True, "limited_by": "kv_wall", "kv_cache_usage_max": 0.97}
    assert verdict_words(ok) == "PASS (nearest limit: KV 97%)" and "limited by" not in verdict_words(ok)
    bad = {"passed": False, "limited_by": "decode",
           "checks": [{"target": "ttft_p95_ms", "limit": 3000, "value": 2000, "ok": True},
                      {"target": "tpot_p95_ms", "limit": 50, "value": 53.2, "ok": False}]}
    assert verdict_words(bad) == "FAIL TPOT p95 53 > 50 ms (limited by decode)"
    edge = dict(bad, checks=[{"target": "tpot_p95_ms", "limit": 150, "value": 150.4, "ok": False}])
    assert "150.4 > 150" in verdict_words(edge)
