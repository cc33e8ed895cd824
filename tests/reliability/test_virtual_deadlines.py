"""The total deadlines of kvtui.safeio, proven on a virtual clock (issue 46: no test judges the wall).

tests/reliability/test_stop_deadlines.py trickles real bytes at a real pace and can only bound the
wall time loosely. Here the same mechanism (kvtui's httpx client, its deadline transport, httpcore,
h11, a real socket to a real server on 127.0.0.1) reads a wire whose pace is virtual time: each
byte of a trickle costs `gap_s` on a VirtualClock, a silent server's wait costs the slice kvtui
asked for. The cut then falls at an exact virtual time and byte, whatever the host's load:

- headers or body trickled at 2 s a byte, total deadline 10 s: cut at 10.0 s after 5 bytes
  (the whole answer would take 55 hours);
- no deadline given: the client's read timeout bounds the whole answer;
- a silent server: the total deadline (shorter) or the per-read timeout (shorter) cuts it;
- a stop: the trickle is cut at the next byte, a silent wait within STOP_POLL_S;
- the /metrics scrape and the token-space discovery's /tokenize probe keep theirs.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpcore
import httpx
import pytest

from kvtui import clock
from kvtui.clock import VirtualClock

BODY = b" " * 100_000
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(BODY)).encode() + b"\r\n\r\n")


class Server:
    """A raw HTTP/1.1 server on 127.0.0.1 that answers every request at once, whole."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.done.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        try:
            c.settimeout(5)
            c.recv(65536)
            c.sendall(HEAD + BODY)
            c.recv(1)  # until the client hangs up
        except OSError:
            pass
        finally:
            c.close()

    def close(self) -> None:
        self.done.set()
        self.sock.close()


class Wire(httpcore.NetworkStream):
    """A real connection whose pace is virtual: past `free` bytes, each read takes one byte and
    `gap_s` of virtual time; `silent`: nothing ever comes, each wait costs its whole timeout."""

    def __init__(self, inner: httpcore.NetworkStream, vc: VirtualClock, gap_s: float, free: int, silent: bool):
        self.inner, self.vc, self.gap_s, self.free, self.silent = inner, vc, gap_s, free, silent
        self.trickled = 0
        self.waits: list[float | None] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.waits.append(timeout)
        if self.silent:
            assert timeout is not None, "an unbounded wait on a silent server"
            self.vc.advance(timeout)
            raise httpcore.ReadTimeout("nothing came")
        if self.free > 0:
            data = self.inner.read(min(max_bytes, self.free), timeout)
            self.free -= len(data)
            return data
        self.vc.advance(self.gap_s)
        data = self.inner.read(1, timeout)
        self.trickled += len(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, timeout)

    def close(self) -> None:
        self.inner.close()

    def get_extra_info(self, info: str):
        return self.inner.get_extra_info(info)


@pytest.fixture
def wire(monkeypatch) -> Iterator:
    """`wire(gap_s=, where=, silent=)` -> (VirtualClock in use, the list of wires opened, url)."""
    srv = Server()
    opened: list[Wire] = []
    vc = VirtualClock(start=100.0)
    real_backend = httpcore.SyncBackend

    def setup(gap_s: float = 2.0, where: str = "headers", silent: bool = False):
        free = len(HEAD) if where == "body" else 0

        class WireBackend(real_backend):  # type: ignore[misc, valid-type]
            def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
                w = Wire(super().connect_tcp(host, port, timeout, local_address, socket_options),
                         vc, gap_s, free, silent)
                opened.append(w)
                return w

        # kvtui's deadline transport wraps httpcore.SyncBackend(): the wire sits under it
        monkeypatch.setattr(httpcore, "SyncBackend", WireBackend)
        return vc, opened, srv.url

    with clock.use(vc):
        yield setup
    srv.close()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickle_is_cut_exactly_at_its_total_deadline(wire, where):
    from kvtui.safeio import fetch, http_client

    vc, opened, url = wire(gap_s=2.0, where=where)
    with http_client(timeout=3.0) as c:  # each byte comes within the 3 s read timeout: it never fires
        t0 = vc.monotonic()
        with pytest.raises(httpx.TimeoutException, match="total deadline"):
            fetch(c, "GET", url + "/health", total_s=10.0)
        assert vc.monotonic() - t0 == 10.0
    assert [w.trickled for w in opened] == [5]  # 5 bytes of 100,000: 2 s each, then the deadline


def test_no_deadline_given_the_clients_read_timeout_bounds_the_whole_answer(wire):
    from kvtui.safeio import fetch, http_client

    vc, opened, url = wire(gap_s=0.5)
    with http_client(timeout=2.0) as c:
        t0 = vc.monotonic()
        with pytest.raises(httpx.TimeoutException, match="total deadline"):
            fetch(c, "GET", url + "/v1/models")
        assert vc.monotonic() - t0 == 2.0
    assert [w.trickled for w in opened] == [4]


@pytest.mark.parametrize("total_s, read_s, cut_at, why", [
    (1.5, 2.0, 1.5, "total deadline"),  # the whole answer's deadline comes first
    (60.0, 2.0, 2.0, "nothing came"),  # the per-read timeout still holds inside a long deadline
])
def test_a_silent_server_is_cut_by_whichever_deadline_comes_first(wire, total_s, read_s, cut_at, why):
    from kvtui.safeio import fetch, http_client

    vc, opened, url = wire(silent=True)
    with http_client(timeout=read_s) as c:
        t0 = vc.monotonic()
        with pytest.raises(httpx.TimeoutException, match=why):
            fetch(c, "GET", url + "/health", total_s=total_s)
        assert vc.monotonic() - t0 == cut_at


def test_a_stop_cuts_a_trickle_at_its_next_byte(wire):
    from kvtui.safeio import fetch, http_client, thread_stop

    vc, opened, url = wire(gap_s=2.0)
    t0 = vc.monotonic()
    with http_client(timeout=3.0) as c, thread_stop(lambda: vc.monotonic() - t0 >= 3.0):  # stopped at 3 s
        with pytest.raises(httpx.TimeoutException, match="stopp"):
            fetch(c, "GET", url + "/version", total_s=60)
    assert vc.monotonic() - t0 == 4.0 and [w.trickled for w in opened] == [2]


def test_a_stop_cuts_a_silent_wait_within_the_stop_poll(wire):
    from kvtui.safeio import STOP_POLL_S, fetch, http_client, thread_stop

    vc, opened, url = wire(silent=True)
    t0 = vc.monotonic()
    with http_client(timeout=30.0) as c, thread_stop(lambda: vc.monotonic() - t0 >= 3.0):
        with pytest.raises(httpx.TimeoutException, match="stopp"):
            fetch(c, "GET", url + "/version", total_s=60)
    assert 3.0 <= vc.monotonic() - t0 <= 3.0 + STOP_POLL_S
    waits = opened[0].waits
    assert waits and all(w is not None and w <= STOP_POLL_S for w in waits), waits  # sliced, never 30 s


def test_a_trickled_metrics_scrape_ends_at_its_timeout(wire):
    from kvtui.runtime.telemetry.prom import MetricsScraper

    vc, opened, url = wire(gap_s=0.25)
    t0 = vc.monotonic()
    with MetricsScraper(url + "/metrics", timeout_s=1.0) as s:
        sample = s.scrape()
    assert not sample.ok and "timed out" in (sample.error or ""), sample.error
    assert vc.monotonic() - t0 == 1.0 and opened[0].trickled == 4
    assert sample.t == t0 + 1.0  # its time is the seam's (virtual), not the host's


def test_token_space_discovery_cuts_a_trickling_tokenize_at_its_timeout(wire):
    from kvtui.runtime.load.workload import discover_token_space

    vc, opened, url = wire(gap_s=0.25)
    t0 = vc.monotonic()
    space = discover_token_space(url, "m", {}, timeout_s=0.5, budget_s=3.0)
    # the first probe's whole answer is cut at its 0.5 s: no /tokenize, synthetic ids, said so
    assert vc.monotonic() - t0 == 0.5 and [w.trickled for w in opened] == [2]
    assert space is not None and space.verified is False and "no /tokenize" in space.source


# -- a server's stop: SIGINT, SIGTERM, SIGKILL, each after its share of the grace -----------------


def test_a_server_that_ignores_its_stop_is_killed_at_its_grace_deadlines(monkeypatch):
    """kvtui.runtime.procs.reaper.terminate on a real process that ignores SIGINT and SIGTERM: the grace
    (timeout 10 s: 50 % after SIGINT, 30 % after SIGTERM) is kept on the clock in use, so the
    escalation is exact and the test waits for no grace on the wall."""
    import signal
    import subprocess
    import sys

    from kvtui.runtime.procs import reaper

    child = ("import signal, sys, time\n"
             "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "print('ready', flush=True)\n"
             "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        sent: list[tuple[int, float]] = []
        real_signal_group = reaper.signal_group
        vc = VirtualClock(start=0.0)

        def spy(pgid: int, sig: int) -> bool:
            sent.append((sig, vc.monotonic()))
            return real_signal_group(pgid, sig)

        monkeypatch.setattr(reaper, "signal_group", spy)
        with clock.use(vc):
            reaper.terminate(proc, proc.pid, timeout_s=10.0)
        assert proc.returncode == -signal.SIGKILL
        assert [s for s, _ in sent] == [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
        assert sent[0][1] == 0.0
        assert sent[1][1] == pytest.approx(5.0, abs=0.051)  # 50 % of 10 s, polled every 0.05 s
        assert sent[2][1] == pytest.approx(8.0, abs=0.101)  # then 30 %
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
