"""Issue 50, part B: what reaches a terminal, what a reader believes, what an ASCII stream gets.

- Control and bidi characters of a snapshot (a mode name holding `ESC]0;…BEL ESC[2J` and U+202E)
  are shown visible by the Markdown export (stdout and file), diff, the TUI's replay (its
  document and the net under every Textual strip), and refused by --resume.
- One validator of a snapshot's facts for every reader: an answer no step had, a negative rate, a
  PASS its own figures fail, duplicate mode names; import refuses what it would make of them.
- Streams that cannot take UTF-8 get ASCII: a run keeps its lines, export and diff end with 0.
"""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FROZEN = ROOT / "tests" / "tui" / "data"
BENCH = ROOT / "tests" / "report" / "data"
EVIL = "fp8\x1b]0;pwned\x07\x1b[2J\u202ekv"


def kvtui(*args, env=None, timeout=120):
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "kvtui", *map(str, args)], capture_output=True, timeout=timeout,
                          env=e)


def _snapshot(tmp: Path, edit=None, name="s.json") -> Path:
    doc = json.loads(lzma.decompress((FROZEN / "l4-demo.json.xz").read_bytes()))
    if edit:
        edit(doc)
    p = tmp / name
    p.write_text(json.dumps(doc))
    (tmp / p.name.replace(".json", ".records.jsonl")).write_bytes(
        lzma.decompress((FROZEN / "l4-demo.records.jsonl.xz").read_bytes()))
    doc["records"] = p.name.replace(".json", ".records.jsonl")
    p.write_text(json.dumps(doc))
    return p


def _rename(doc):
    old = doc["modes"][-1]["name"]
    doc["modes"][-1]["name"] = EVIL
    for m in doc["scenario"].get("modes") or []:
        if m.get("name") == old:
            m["name"] = EVIL


RAW = (b"\x1b", b"\x07", "\u202e".encode())


def test_controls_and_bidi_from_a_snapshot_are_visible_in_export_and_diff(tmp_path):
    snap = _snapshot(tmp_path, _rename)
    other = _snapshot(tmp_path, name="o.json")
    for args in (("export", snap, "--format", "md", "--out", "-"), ("diff", other, snap),
                 ("diff", other, snap, "--format", "md")):
        r = kvtui(*args)
        assert r.returncode == 0, r.stderr
        assert not any(c in r.stdout for c in RAW), args
        assert b"\\x1b" in r.stdout and b"\\u202e" in r.stdout, args
    out = tmp_path / "x.md"
    r = kvtui("export", snap, "--format", "md", "--out", out)
    assert r.returncode == 0, r.stderr
    assert not any(c in out.read_bytes() for c in RAW) and b"\\u202e" in out.read_bytes()


def test_resume_refuses_a_mode_name_with_controls(tmp_path):
    def edit(doc):
        _rename(doc)
        doc["modes"][-1]["complete"] = False

    snap = _snapshot(tmp_path, edit)
    r = kvtui("run", "--resume", snap, "--fast", "--headless", "--out", tmp_path / "r.json")
    assert r.returncode == 2 and b"not a mode name" in r.stderr, r.stderr[-400:]
    assert not any(c in r.stderr + r.stdout for c in RAW)
    assert not (tmp_path / "r.json").exists()


async def test_the_replay_app_shows_no_control_of_the_file(tmp_path):
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.tui.app import make_app
    from kvtui.tui.options import AppOptions

    doc = load_snapshot(_snapshot(tmp_path, _rename))
    app = make_app(AppOptions(snapshot=doc, view="dashboard"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        names = [m.get("name") for m in app.snapshot["modes"]]
        assert EVIL not in names and any("\\u202e" in n for n in names)
        svg = app.export_screenshot()
    assert "\x1b" not in svg and "\u202e" not in svg


def test_every_strip_textual_draws_has_its_controls_made_visible():
    from rich.console import Console
    from rich.segment import Segment
    from textual.strip import Strip

    from kvtui.tui.textnet import guard_textual

    guard_textual()
    out = Strip([Segment("a\x1b]0;t\x07\x1b[2J\u202eb")]).render(Console())
    assert "\x1b]0" not in out and "\x1b[2J" not in out and "\u202e" not in out and "\u241b" in out


def _bad_best(doc):
    doc["modes"][0]["best_concurrency"] = 999


def _bad_rate(doc):
    doc["modes"][0]["steps"][0]["output_tok_s"] = -500


def _bad_pass(doc):
    st = next(s for s in doc["modes"][0]["steps"] if s.get("passed") is True)
    st["ttft_ms"]["p95"] = 999999.0


def _dup(doc):
    doc["modes"][1]["name"] = doc["modes"][0]["name"]


@pytest.mark.parametrize("edit", [_bad_best, _bad_rate, _bad_pass, _dup])
def test_every_reader_refuses_impossible_facts(tmp_path, edit):
    snap = _snapshot(tmp_path, edit)
    good = _snapshot(tmp_path, name="g.json")
    for args in (("export", snap, "--format", "md", "--out", "-"), ("export", snap, "--format", "svg", "--out",
                 tmp_path / "x.svg"), ("diff", good, snap), ("whatif", snap), ("calibrate", snap)):
        r = kvtui(*args)
        assert r.returncode == 2, (args, r.returncode, r.stderr[-600:])
        assert b"Traceback" not in r.stderr and b"impossible figures" in r.stderr, (args, r.stderr[-400:])


@pytest.mark.parametrize("field,value", [("max_concurrency", -3), ("p95_ttft_ms", -80), ("completed", 1e300),
                                         ("output_throughput", -500)])
def test_import_refuses_what_no_reader_would_believe(tmp_path, field, value):
    src = json.loads((BENCH / "a_c32.json").read_text())
    src[field] = value
    src.setdefault("p95_ttft_ms", src["p99_ttft_ms"])
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(src))
    out = tmp_path / "imp.json"
    r = kvtui("import", f, "--out", out)
    assert r.returncode == 2 and b"Traceback" not in r.stderr, r.stderr[-600:]
    assert not out.exists()


ASCII_ENVS = [{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"},
              {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}]


@pytest.mark.parametrize("env", ASCII_ENVS, ids=["ascii", "latin-1", "C"])
def test_export_and_diff_to_a_stream_without_utf8(tmp_path, env):
    snap = _snapshot(tmp_path, _rename)
    other = _snapshot(tmp_path, name="o.json")
    for args in (("export", snap, "--format", "md", "--out", "-"), ("diff", other, snap)):
        r = kvtui(*args, env=env)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, (args, r.stderr[-500:])
        assert len(r.stdout) > 200
        enc = "latin-1" if env.get("PYTHONIOENCODING") == "latin-1" else "ascii"
        r.stdout.decode(enc)  # every byte is the stream's own


def test_a_run_keeps_its_lines_on_an_ascii_stream(tmp_path):
    out = tmp_path / "a.json"
    r = kvtui("run", "sim-demo", "--fast", "--headless", "--out", out, "--mode", "bf16",
              env={"PYTHONIOENCODING": "ascii"}, timeout=300)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-600:]
    r.stdout.decode("ascii")
    assert b"max concurrency at SLO" in r.stdout and b"c=" in r.stdout


def test_secrets_are_known_by_what_they_are_not_one_spelling():
    from kvtui.report.outcome import resume_command
    from kvtui.secrets import redact_args, redact_env, scrub, scrub_text, strip_url_password

    args = redact_args(["--hf_token", "K1", "--hf-tok", "K2", "--openai-key=K3", "--db_password", "K4",
                        "--max-num-batched-tokens", "8192", "--enforce-eager"])
    assert not any(k in args for k in ("K1", "K2", "K4")) and "--openai-key=<redacted>" in args
    assert "8192" in args and "--enforce-eager" in args  # a count is no secret
    env = redact_env({"OPENAI_KEY": "K5", "GITHUB_PAT": "K6", "HF_AUTH": "K7", "DATABASE_URL": "postgres://u:pw9@db/x",
                      "OMP_NUM_THREADS": "4"})
    assert "K5" not in str(env) and "K6" not in str(env) and "K7" not in str(env) and "pw9" not in str(env)
    assert env["OMP_NUM_THREADS"] == "4" and env["DATABASE_URL"].startswith("postgres://u:")
    assert "K8" not in strip_url_password("http://127.0.0.1:8000/v1?api_key=K8&x=1")
    assert "K9" not in scrub_text("launch --hf-tok K9 done", [])
    doc = scrub({"scenario": {"server": {"env": {"HF_AUTH": "KA"}, "extra_args": ["--hf_token", "KB"]}}})
    assert "KA" not in json.dumps(doc) and "KB" not in json.dumps(doc)
    hint = resume_command(["run", "x.toml", "--set", "server.api_key=KC", "--set",
                           'server.extra_args=["--hf-tok","KD"]'], "o.json")
    assert "KC" not in hint and "KD" not in hint


def test_a_server_url_with_a_query_is_refused_without_repeating_it(tmp_path):
    sc = tmp_path / "s.toml"
    sc.write_text('name = "q"\n[server]\nengine = "external"\nurl = "http://127.0.0.1:9/v1?api_key=KEYQ"\n'
                  '[[modes]]\nname = "a"\n')
    r = kvtui("run", sc, "--headless", "--out", tmp_path / "o.json")
    assert r.returncode == 2 and b"server.url" in r.stderr and b"query" in r.stderr, r.stderr[-400:]
    assert b"KEYQ" not in r.stderr + r.stdout
