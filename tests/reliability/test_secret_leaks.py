"""Secrets that a server hands back, or that a URL carries, never reach a file or the terminal.

A real hostile server (echo_server.py) echoes the Authorization header in a 500 body and in an
SSE error event; a metrics_url on another host must not receive the key; a password in
`server.url` must not be stored in the snapshot or printed, and still authenticates.
"""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from reliability_helpers import HERE, free_port, headless

KEY = "sk-kvtui-secret-0123456789abcdef"
PASSWORD = "pw-Very-Secret-42"

SCENARIO = """
name = "leak"
[server]
engine = "external"
url = "{url}"
metrics_url = "{metrics}"
api_key = "{key}"
max_model_len = 4096
[[modes]]
name = "baseline"
[workload]
prompt_tokens = 16
output_tokens = 4
[ramp]
start = 2
max = 2
search = "linear"
confirm = false
warmup_s = 0.2
window_s = 1
request_timeout_s = 10
drain_timeout_s = 2
max_error_burst = 1000
[slo]
tpot_p95_ms = 500
"""


def _echo(host: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "echo_server.py"), host, str(port)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{host}:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    pytest.skip(f"cannot serve on {host}")


@pytest.fixture
def echo_servers():
    started = []

    def make(host="127.0.0.1"):
        p, url = _echo(host)
        started.append(p)
        return url

    yield make
    for p in started:
        p.kill()
        p.wait(10)


def _all_output(h) -> str:
    texts = [h.stdout(), h.stderr()]
    for p in (h.out, h.records, h.journal):
        if p.exists():
            texts.append(p.read_text(errors="replace"))
    return "\n".join(texts)


def test_a_server_echoing_the_key_never_puts_it_into_records_and_metrics_elsewhere_never_get_it(tmp_path, echo_servers, runs):
    url = echo_servers("127.0.0.1")
    metrics = echo_servers("127.0.0.2")  # another host (a loopback alias)
    sp = tmp_path / "leak.toml"
    sp.write_text(SCENARIO.format(url=url, metrics=metrics + "/metrics", key=KEY))
    h = headless(tmp_path, sp)
    runs.append(h)
    h.wait()
    everything = _all_output(h)
    records = h.records.read_text()
    assert "HTTP 500" in records and "Authorization" in records  # the echoes were recorded, scrubbed
    assert KEY not in everything
    assert httpx.get(url + "/_seen", trust_env=False).json()["completions"][0] == f"Bearer {KEY}"
    seen_by_metrics = httpx.get(metrics + "/_seen", trust_env=False).json().get("metrics", [])
    assert seen_by_metrics and all(s == "" for s in seen_by_metrics)


def test_a_password_in_the_url_is_used_but_never_stored_or_printed(tmp_path, echo_servers, runs):
    url = echo_servers("127.0.0.1")
    with_pw = url.replace("http://", f"http://bench:{PASSWORD}@")
    sp = tmp_path / "pw.toml"
    # /metrics on the same origin, named without the password: the scrapes take it from the URL's.
    sp.write_text(SCENARIO.format(url=with_pw, metrics=url + "/metrics", key="").replace('api_key = ""\n', ""))
    h = headless(tmp_path, sp, "-v")
    runs.append(h)
    h.wait()
    everything = _all_output(h)
    assert PASSWORD not in everything
    import base64

    seen = httpx.get(url + "/_seen", trust_env=False).json()
    basic = "Basic " + base64.b64encode(f"bench:{PASSWORD}".encode()).decode()
    sent = seen["completions"]
    assert sent and sent[0] == basic
    # The /metrics of that same origin get the same credentials (the scrapes as the requests).
    assert seen.get("metrics") and all(s == basic for s in seen["metrics"]), seen.get("metrics")
