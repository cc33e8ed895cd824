"""`kvtui run --url …`: a server already running, measured in one command, no scenario file.

The server is a real `kvtui sim serve` over HTTP on 127.0.0.1 with its knee model (`--knee 6`:
a step takes 20 ms up to 6 running requests and 3x that above), so the normal search must land
on 6 whatever this box's speed. What is asserted besides the knee: the limits the run states
(no precision switch, GPU telemetry, what /metrics shows), the key never written, and the bad
input refused in one line with exit code 2.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sim_server import serving_sim

from kvtui.cli.entry import main as cli_main
from kvtui.runtime.procs.servers import free_port

KEY = "url-test-key-8d2f61"
FAST = ["--set", "ramp.warmup_s=0.3", "--set", "ramp.window_s=1.5", "--set", "ramp.max=8", "--set", "ramp.confirm=false",
        "--set", "ramp.min_samples=1", "--set", "slo.tpot_p50_ms=40", "--set", "workload.prompt_tokens=64",
        "--set", "workload.output_tokens=40"]


@pytest.fixture(scope="module")
def sim():
    with serving_sim(KEY, "--knee", "6", "--knee-tpot-ms", "20", "--knee-slowdown", "3") as base:
        yield base


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli_main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_url_alone_finds_the_knee_and_states_what_it_cannot_see(sim, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVTUI_URL_TEST_KEY", KEY)
    out = tmp_path / "url.json"
    code, stdout, stderr = _run(["run", "--url", f"{sim}/v1", "--api-key-env", "KVTUI_URL_TEST_KEY", "--headless",
                                 "--out", str(out), *FAST], capsys)
    assert code == 0, stderr
    # What it saw before anything ran, in plain words
    assert "model 'knee', one mode 'knee' (engine external)" in stdout
    assert "sees: /metrics: KV cache usage" in stdout
    assert "cannot see: a precision switch" in stdout
    assert "kvtui's simulator" in stdout
    doc = json.loads(out.read_text())
    (mode,) = doc["modes"]
    assert mode["name"] == "knee" and mode["engine"] == "external"
    assert mode["best_concurrency"] == 6, [(s["load"], s.get("passed")) for s in mode["steps"]]
    assert any(s["load"] == 7 and s.get("passed") is False for s in mode["steps"])  # bounded: 7 measured and failed
    # The limits travel with the figures: the snapshot's mode warnings (the caveats of every answer)
    warnings = mode["server"]["warnings"]
    assert any("no precision switch" in w for w in warnings), warnings
    assert any("GPU telemetry" in w for w in warnings), warnings
    assert mode["simulated"] is True and any(w.startswith("SIMULATED") for w in warnings)
    assert mode["server"]["kv_cache_tokens"]  # the KV cache's size, as /metrics states it
    assert doc["scenario"]["server"]["url"] == f"{sim}/v1" and doc["scenario"]["name"] == "url-knee"
    # The key: read from the environment, never written nor printed
    for text in (out.read_text(), out.with_name("url.records.jsonl").read_text(), stdout, stderr):
        assert KEY not in text


def test_url_with_a_scenario_keeps_its_slo_and_ramp_and_replaces_its_modes(sim, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVTUI_URL_TEST_KEY", KEY)
    sp = tmp_path / "mine.toml"
    sp.write_text('name = "mine"\n[server]\nengine = "sim"\n[[modes]]\nname = "bf16"\n[[modes]]\nname = "fp8"\n'
                  'quantization = "fp8"\n[workload]\nprompt_tokens = 64\noutput_tokens = 16\n'
                  '[ramp]\nstep = "5,7"\nsearch = "linear"\nwarmup_s = 0.3\nwindow_s = 0.6\nconfirm = false\n'
                  'min_samples = 1\n[slo]\ntpot_p50_ms = 40\n')
    out = tmp_path / "mine.json"
    code, stdout, stderr = _run(["run", str(sp), "--url", sim, "--api-key-env", "KVTUI_URL_TEST_KEY", "--json",
                                 "--out", str(out)], capsys)
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert [m["name"] for m in doc["modes"]] == ["knee"]
    assert [(s["load"], s["passed"]) for s in doc["modes"][0]["steps"]] == [(5, True), (7, False)]
    assert doc["scenario"]["name"] == "mine" and doc["scenario"]["slo"]["latency"] == {"tpot_p50_ms": 40}
    assert "the scenario's server and modes are replaced by the server at" in stderr
    json.loads(stdout)  # --json: the answer alone on stdout


class _TwoModels(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"object": "list", "data": [{"id": "org/a-8b", "object": "model"},
                                                      {"id": "lora-b", "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def two_models():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _TwoModels)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _refused(argv: list[str], capsys, tmp_path: Path) -> str:
    out = tmp_path / "never.json"
    code, stdout, stderr = _run(["run", *argv, "--headless", "--out", str(out)], capsys)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, (code, stderr)
    assert not out.exists()
    return lines[0]


def test_bad_urls_keys_and_models_are_refused_in_one_line(sim, two_models, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KVTUI_URL_UNSET", raising=False)
    assert "not an http(s) URL" in _refused(["--url", "ftp://127.0.0.1:8000/v1"], capsys, tmp_path)
    assert "not an http(s) URL" in _refused(["--url", "127.0.0.1:8000"], capsys, tmp_path)
    line = _refused(["--url", "http://user:hunter2@127.0.0.1:8000:9/v1"], capsys, tmp_path)
    assert "not an http(s) URL" in line and "hunter2" not in line
    line = _refused(["--url", sim, "--api-key-env", "KVTUI_URL_UNSET"], capsys, tmp_path)
    assert "KVTUI_URL_UNSET" in line and "not set" in line
    dead = f"http://127.0.0.1:{free_port()}/v1"
    assert "cannot reach it" in _refused(["--url", dead], capsys, tmp_path)
    assert "wants an API key" in _refused(["--url", sim], capsys, tmp_path)  # the sim requires KEY
    line = _refused(["--url", two_models], capsys, tmp_path)
    assert "serves 2 models" in line and "'org/a-8b'" in line and "--model" in line
    assert "not served" in _refused(["--url", two_models, "--model", "c"], capsys, tmp_path)
    assert "goes with --url" in _refused(["--model", "org/a-8b"], capsys, tmp_path)
    assert "drop --engine vllm" in _refused(["--url", sim, "--engine", "vllm"], capsys, tmp_path)


def test_a_served_model_id_becomes_a_valid_mode_name():
    from kvtui.cli.url_target import mode_name

    assert mode_name("meta-llama/Llama-3.1-8B-Instruct") == "Llama-3.1-8B-Instruct"
    assert mode_name("/models/my model:v2/") == "my-model-v2"
    assert mode_name("--help") == "help" and mode_name("///") == "server"
