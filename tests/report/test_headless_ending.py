"""The headless run ends with the answer's lines, then a table that fits the terminal; --json is the
answer for scripts, alone on stdout, and it is the snapshot's answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kvtui.cli.headless_print import answer_json
from kvtui.io.snapshot.file import load_snapshot
from kvtui.report.fit_table import fit


def _run(tmp_path, *args, columns=80):
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-demo", "--fast", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": str(columns)})
    assert r.returncode == 0, r.stderr[-2000:]
    return r, load_snapshot(out)


def test_the_ending_at_80_columns_is_the_answer_then_a_table_that_fits(tmp_path):
    r, doc = _run(tmp_path, "--headless")
    # a prediction is news, not a fault: said as the mode's prediction, never as "warning:"
    assert "[fp8-kv] predicted (SIMULATED, L4, calibration " in r.stdout
    assert not [line for line in r.stdout.splitlines() if "warning:" in line and "predict" in line]
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
    assert parsed == json.loads(json.dumps(answer_json(doc, tmp_path / "run.json"), default=str))
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


def test_a_stopped_runs_line_gives_the_users_own_command_to_continue_it():
    from kvtui.report.outcome import resume_command, stopped_line

    doc = {"run": {"outcome": "stopped", "modes_cut": ["bf16"], "modes_not_run": ["fp8-kv"], "stop_reason": "quit"}}
    again = resume_command(["run", "sim-demo", "--set", "ramp.max=64", "--out", "a b.json", "--resume=old.json"],
                           "a b.json")
    assert again == "kvtui run sim-demo --set ramp.max=64 --resume 'a b.json' --out 'a b.json'"
    line = stopped_line(doc, again)
    assert line == ("the run was stopped before its modes finished (cut short: bf16; not run: fp8-kv; quit); "
                    f"continue it: {again}")
    assert stopped_line({"run": {"outcome": "finished"}}) is None


def test_json_says_the_run_it_answers(tmp_path):
    r, doc = _run(tmp_path, "--json", "--mode", "bf16")
    parsed = json.loads(r.stdout)
    assert parsed["run"]["gpu"] == "L4" and parsed["run"]["simulated"] is True and parsed["run"]["engine"] == "sim"
    assert parsed["run"]["outcome"] == "finished" and parsed["run"]["snapshot"].endswith("run.json")
    assert parsed["stopped"] is None


def test_a_step_tables_limit_cell_agrees_with_its_verdict():
    # "| PASS | KV wall |" under "limited by" read as a pass limited by the KV wall: a PASS names only the
    # limit it came near, in the Markdown step table and the dashboard's alike (report.text.limit_cell).
    from kvtui.report.text import STEP_HEADERS, limit_cell, step_row

    assert limit_cell({"passed": True, "limited_by": "kv_wall"}) == "near KV wall"
    assert limit_cell({"passed": True, "limited_by": "decode"}) == "—"
    assert limit_cell({"passed": False, "limited_by": "kv_wall"}) == "KV wall"
    row = dict(zip(STEP_HEADERS, step_row({"passed": True, "limited_by": "kv_wall", "load": 11})))
    assert row["result"] == "PASS" and row["limit"] == "near KV wall" and "limited by" not in STEP_HEADERS


def test_replay_on_a_dumb_terminal_fits_80_columns():
    # TERM=dumb: the answer as plain lines, fitted as the headless ending is (it printed the whole
    # ~260-column comparison); every published run, the one with real weights and its caveats among them.
    from kvtui import PROJECT_ROOT

    for name in ("h200-v2", "h200-smollm2", "h200-kvb"):
        r = subprocess.run([sys.executable, "-m", "kvtui", "replay", str(PROJECT_ROOT / "docs/results" / f"{name}.json")],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "TERM": "dumb", "COLUMNS": "80"})
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("ANSWER: ") and "Modes vs baseline" in r.stdout and "\x1b" not in r.stdout
        long = [line for line in r.stdout.splitlines() if len(line) > 80]
        assert not long, (name, long)
        if name == "h200-smollm2":  # the eager-mode caveat on the comparison, whole
            assert "launched with --enforce-eager (no CUDA graphs)" in r.stdout


def test_on_an_80_column_terminal_every_headless_line_fits(tmp_path):
    # A person at an 80-column terminal: the step lines (130-150 characters) wrapped mid-word. On a
    # terminal they are wrapped at a word, the rest indented; to a pipe they stay whole (above).
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    p = subprocess.Popen([sys.executable, "-m", "kvtui", "run", "sim-demo", "--fast", "--headless",
                          "--out", str(tmp_path / "tty.json")], stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    assert p.wait(timeout=300) == 0
    os.close(master)
    text = b"".join(chunks).decode("utf-8", errors="replace").replace("\r\n", "\n")
    assert "ANSWER:" in text and "[fp8-kv] c=" in text
    long = [line for line in text.splitlines() if len(line) > 80 and " " in line.strip()]
    assert not long, long
    # each step on ONE line (issue 49): its short form at 80 columns, the verdict on the step's own line
    steps = [line for line in text.splitlines() if line.startswith(("[bf16] c=", "[fp8-kv] c="))]
    assert steps and all("PASS" in line or "FAIL" in line for line in steps), steps
    assert not any(line.startswith("    ") and ("PASS" in line or "FAIL" in line) for line in text.splitlines())


def test_one_wording_for_the_pace_and_for_long_latencies():
    # The TUI said "fast-forward ×8" where the headless run said "slow motion ×0.125"; a sparkline read "21kms".
    from kvtui.report.text import speed_words
    from kvtui.tui.charts import fmt_num

    assert speed_words(0.125) == "fast-forward ×8" and speed_words(4.0) == "slow motion ×4" and speed_words(1.0) == ""
    assert fmt_num(21000.0, "ms") == "21s" and fmt_num(21000.0) == "21k" and fmt_num(2021.0, "ms") == "2021ms"


def test_no_mode_started_is_not_no_mode_met_the_slo(tmp_path):
    # a 70B shape on an L4 fits in no mode: the answer said "no mode met the SLO", as if it had been measured
    from kvtui.report.answer import build_answer, headline

    out = tmp_path / "l4.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-demo", "--fast", "--headless", "--out", str(out),
                        "--set", 'server.model="llama-3.1-70b"', "--mode", "bf16"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "ANSWER: no mode started" in r.stdout
    assert headline(build_answer(load_snapshot(out))).startswith("no mode started")


def test_long_mode_names_leave_room_for_the_figures():
    # 47-character mode names took the width: at 80 columns only "max conc @SLO" was left
    from kvtui.report.fit_table import fitted_table, short_first_column

    heads = ["mode", "max conc @SLO", "×", "out tok/s @SLO", "×"]
    rows = [["bf16-baseline-with-a-rather-long-mode-name", "11", "1.00×", "87", "1.00×"],
            ["fp8-kv-cache-with-an-even-longer-mode-name-here", "16", "1.46×", "113", "1.29×"]]
    out = fitted_table(heads, rows, 80)
    assert "out tok/s @SLO" in out and "not shown" not in out
    assert "= bf16-baseline-with-a-rather-long-mode-name" in out and all(len(x) <= 80 for x in out.splitlines())
    twins, names = short_first_column([["fp8-kv-cache-aaaaaaaaaaaa-x"], ["fp8-kv-cache-bbbbbbbbbbbb-x"],
                                       ["fp8-kv-cache-bbbbbbbbbbbb-x [B]"]], 16)
    assert twins[0][0] != twins[1][0] and twins[2][0] == twins[1][0] + " [B]" and len(names) == 2
