"""Secrets (the API key, env values marked secret, the per-run server keys) never reach any file or export."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from kvtui.cli.export import render  # every format, the SVG dashboard too
from kvtui.io.snapshot.file import load_snapshot
from kvtui.secrets import scrub, scrub_text

FORMATS = ["json", "md", "csv"] + (["svg"] if importlib.util.find_spec("kvtui.tui.svg") else [])


def _assert_clean(text: str, secrets, where: str) -> None:
    for s in secrets:
        assert s not in text, f"{s!r} leaked into {where}"


def test_no_secret_in_any_file_or_export(three_modes, tmp_path):
    secrets = list(three_modes.secrets) + list(three_modes.sim_keys)
    assert len(three_modes.sim_keys) == 3  # one per mode's simulator: they were real and in use
    files = [p for p in three_modes.dir.iterdir() if p.is_file()]
    assert {p.name for p in files} >= {"three.json", "three.records.jsonl", "first.json", "first.records.jsonl", "three.toml"}
    for p in files:
        if p.suffix == ".toml":
            continue  # the user's own scenario file
        _assert_clean(p.read_text(), secrets, p.name)
    assert three_modes.journal_copies
    for i, j in enumerate(three_modes.journal_copies):
        _assert_clean(j, secrets, f"journal #{i}")
    # The values were redacted, not dropped: a reader sees that they existed.
    doc = three_modes.doc
    env = doc["scenario"]["server"]["env"]
    assert env == {"MY_DB_URL": "<redacted>", "HF_TOKEN": "<redacted>", "PLAIN_SETTING": "visible-value"}
    assert doc["scenario"]["server"]["api_key"] == "<redacted>"
    assert doc["modes"][1]["settings"]["env"] == {"OTHER_API_KEY": "<redacted>"}
    # Every export format, in process and through the command line.
    for fmt in FORMATS:
        _assert_clean(render(doc, fmt), secrets, f"export {fmt}")
        out = tmp_path / f"x.{fmt}"
        r = subprocess.run([sys.executable, "-m", "kvtui", "export", str(three_modes.path), "--format", fmt, "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        _assert_clean(out.read_text() + r.stdout + r.stderr, secrets, f"kvtui export --format {fmt}")
    r = subprocess.run([sys.executable, "-m", "kvtui", "diff", str(three_modes.first), str(three_modes.path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    _assert_clean(r.stdout + r.stderr, secrets, "kvtui diff")
    assert "visible-value" in render(doc, "md")  # ordinary settings are still shown


def test_export_scrubs_a_snapshot_that_carries_secrets_anyway(three_modes, tmp_path, monkeypatch):
    """A snapshot written by something else (an older kvtui, a hand edit) still exports clean."""
    monkeypatch.setenv("KVTUI_TEST_ACCESS_TOKEN", "proc-env-SECRET-7777")
    doc = load_snapshot(three_modes.path)
    doc["scenario"]["server"]["api_key"] = "sk-leaked-in-scenario-1234"
    doc["scenario"]["server"]["env"]["MY_DB_URL"] = "leaked-declared-secret-5555"
    doc["scenario"]["server"]["url"] = "https://user:url-password-3333@host:8000/v1"
    m = doc["modes"][0]
    m["settings"]["extra_args"] = ["--api-key", "leaked-arg-key-2222", "--max-num-seqs", "64"]
    m["engine_info"]["command"] = ["vllm", "serve", "--api-key=leaked-cmd-key-4444"]
    m["error"] = {"kind": "crashed", "message": "boom", "log_tail": "curl -H 'Authorization: Bearer leaked-bearer-8888' "
                  "x; HF_TOKEN=leaked-hf-6666; seen proc-env-SECRET-7777"}
    m["engine_info"]["hf_token"] = "leaked-field-9999"
    leaked = ["sk-leaked-in-scenario-1234", "leaked-declared-secret-5555", "url-password-3333", "leaked-arg-key-2222",
              "leaked-cmd-key-4444", "leaked-bearer-8888", "leaked-hf-6666", "proc-env-SECRET-7777", "leaked-field-9999"]
    for fmt in ("json", "md", "csv"):
        _assert_clean(render(doc, fmt), leaked, f"export {fmt}")
    clean = scrub(doc)
    assert clean["modes"][0]["settings"]["extra_args"] == ["--api-key", "<redacted>", "--max-num-seqs", "64"]
    assert "64" in render(doc, "md")
    # Scrubbing is idempotent: an export of an export is unchanged.
    assert scrub(clean) == clean
    assert scrub_text("max_num_batched_tokens=8192 kv_cache_tokens: 1000") == "max_num_batched_tokens=8192 kv_cache_tokens: 1000"
