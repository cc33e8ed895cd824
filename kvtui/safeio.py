"""Read untrusted input safely: files (regular files only, with a size cap, never blocking),
JSON (bounded depth, sizes and numbers), a server's answer (a bounded body, bounded JSON).

`/dev/zero` as a scenario ended in MemoryError and a FIFO hung kvtui forever. Every file
kvtui reads on a user's word (scenario, snapshot, journal, import, resume, dataset) goes
through `read_text_file`: opened non-blocking (a FIFO opens at once instead of waiting for a
writer), checked to be a regular file by fstat, and read to at most `cap` bytes.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from kvtui import clock
from kvtui.errors import UsageError

MiB = 1 << 20
SCENARIO_CAP = 4 * MiB
SNAPSHOT_CAP = 2048 * MiB  # a long run's snapshot (steps, series) is tens of MB; the records live beside it
DATASET_CAP = 2048 * MiB


def open_regular(path: str | Path, what: str, cap: int) -> int:
    """An fd of `path` opened for reading, after checking it is a regular file of ≤ cap bytes."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{p}: no such {what} file")
    except IsADirectoryError:
        raise UsageError(f"{p}: cannot read: is a directory, not a {what} file")
    except OSError as e:
        raise UsageError(f"{p}: cannot read: {e.strerror or e}")
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{p}: cannot read: is a directory, not a {what} file")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise UsageError(f"{p}: {kind}, not a regular {what} file")
        if st.st_size > cap:
            raise UsageError(f"{p}: {st.st_size / MiB:,.1f} MiB, more than a {what} file can be ({cap / MiB:,.0f} MiB)")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def input_problem(path: str | Path) -> str | None:
    """Why `path`, when it exists, is no file to read (a FIFO, a device, a socket, a directory:
    following links, as a reader does); None when it is a regular file or absent. For an input
    named by another file (a snapshot's records sidecar), checked before anything runs."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # absent (or unreachable): its reader says so
    if stat.S_ISREG(st.st_mode):
        return None
    return f"is {_kind(st.st_mode)}, not a regular file"


def read_bytes_file(path: str | Path, what: str, cap: int) -> bytes:
    fd = open_regular(path, what, cap)
    with os.fdopen(fd, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:  # grew while we read
        raise UsageError(f"{path}: more than a {what} file can be ({cap / MiB:,.0f} MiB)")
    return data


def read_text_file(path: str | Path, what: str, cap: int, errors: str = "strict") -> str:
    """The file's text (UTF-8); a UsageError naming the file when it is not one to read."""
    data = read_bytes_file(path, what, cap)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: cannot read: not UTF-8 text (byte {e.start})")


# -- outputs: checked like inputs ------------------------------------------------------------
#
# `--out` naming a FIFO or a character device was once replaced by a regular 0600 file, and as
# root `--out /dev/null` replaced the system's /dev/null (its records sidecar appeared beside it).
# Every path kvtui writes goes through `check_output` before anything runs, and every writer
# opens through `open_append` / `atomic_write`, which check again at the open and at the rename.
#
# The rule: a path kvtui writes must not exist yet, or be a regular file. A symlink is refused
# too, whatever it points at: the atomic rename would replace the link itself, not the file it
# names (a link to /etc/passwd stays untouched, but a user expecting their linked file updated
# would find it was not), and an append through a link would write wherever it points. Name the
# real path instead. Directories, devices, FIFOs and sockets are refused, each by name.

def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def output_problem(path: str | Path) -> str | None:
    """Why kvtui must not write `path` (None when it may: absent, or a regular file)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return None  # a folder on its path missing or not one: the writer's own error says so
    if stat.S_ISREG(st.st_mode):
        return None
    return f"is {_kind(st.st_mode)}, not a regular file"


def check_output(path: str | Path, what: str = "output") -> Path:
    """`path` when kvtui may write it; else one UsageError line naming it and why (exit 2)."""
    why = output_problem(path)
    if why is not None:
        hint = "; name the real file" if "symbolic" in why else ""
        raise UsageError(f"{path}: cannot write the {what}: it {why} (kvtui writes only regular files "
                         f"or new paths{hint})")
    return Path(path)


def open_append(path: str | Path, what: str = "output", binary: bool = False, mode: int = 0o600):
    """`path` opened for appending (created 0600), refused when it is not a regular file.

    O_NOFOLLOW: a link planted after the check is not followed; O_NONBLOCK: a FIFO planted
    after the check fails at once (ENXIO) instead of waiting for a reader; fstat: a device
    opened meanwhile is closed unwritten."""
    return _open_checked(path, what, binary, mode, os.O_APPEND)


def open_write(path: str | Path, what: str = "output", binary: bool = True, mode: int = 0o600):
    """`path` opened for writing from its start (created 0600, truncated), with open_append's checks:
    for a scratch file kvtui renames into place itself (a part file of a download)."""
    return _open_checked(path, what, binary, mode, os.O_TRUNC)


def _open_checked(path: str | Path, what: str, binary: bool, mode: int, how: int):
    check_output(path, what)
    flags = (os.O_WRONLY | os.O_CREAT | how | os.O_NONBLOCK
             | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(str(path), flags, mode)
    except OSError:
        if output_problem(path) is not None:
            check_output(path, what)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path}: cannot write the {what}: it is {_kind(st.st_mode)}, "
                             "not a regular file (kvtui writes only regular files or new paths)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    kind = "a" if how == os.O_APPEND else "w"
    if binary:
        return os.fdopen(fd, kind + "b")
    return os.fdopen(fd, kind, encoding="utf-8")


def atomic_write(path: str | Path, data: str | bytes, what: str = "output") -> None:
    """Write via a private (0600) temp file in the same directory, fsync, rename: never half a
    file, and never over anything but a regular file: checked before, and again at the rename
    (a FIFO or device put there while the data was written is refused, the temp file removed)."""
    import tempfile

    path = Path(path)
    check_output(path, what)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        check_output(path, what)  # at the rename: the target may have changed meanwhile
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- JSON read from a file: bounded depth, string sizes and numbers ----------------------------
#
# `[` × 200k raised RecursionError out of export, diff and resume; a 100 MB string made them
# hang; an integer of 5,000 digits raised ValueError (Python's int-from-text limit) out of all of
# them, and a load of 1e999 (infinity) an OverflowError out of calibrate. Everything kvtui reads
# as JSON from a user's file (snapshot, journal lines, records, imports) goes through `loads`: the
# C parser (which stops itself at the interpreter's recursion limit and at 4,300 digits: each
# becomes one line), then one iterative walk refusing a document deeper than MAX_DEPTH, with a
# string (key or value) longer than MAX_STRING, or — for kvtui's own files — a number kvtui never
# writes: NaN, ±Infinity (a literal, or 1e999 overflowing to one) or an integer past ±MAX_INT
# (kvtui writes an infinite latency as the string "inf", and no count or seed comes near 2**64).
# Nothing kvtui writes comes near any bound: a snapshot is ~8 levels deep, its longest string a
# log line.

MAX_DEPTH = 64
MAX_STRING = 1 * MiB
MAX_INT = 2**64


class JSONBoundsError(ValueError):
    """A JSON document past MAX_DEPTH, MAX_STRING or the numbers kvtui writes, or past the parser's limits."""


def check_bounds(doc: object, max_depth: int = MAX_DEPTH, max_string: int = MAX_STRING,
                 numbers: bool = True) -> None:
    """Raise JSONBoundsError when `doc` is nested deeper than max_depth or holds a longer string;
    with `numbers`, also when it holds a number that is not finite or an integer past ±MAX_INT."""
    import math

    stack: list[tuple[object, int]] = [(doc, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, str):
            if len(x) > max_string:
                raise JSONBoundsError(f"a string of {len(x):,} characters (at most {max_string:,})")
        elif isinstance(x, (dict, list)):
            if d > max_depth:
                raise JSONBoundsError(f"nested more than {max_depth} levels deep")
            if isinstance(x, dict):
                for k, v in x.items():
                    if len(k) > max_string:
                        raise JSONBoundsError(f"a key of {len(k):,} characters (at most {max_string:,})")
                    stack.append((v, d + 1))
            else:
                stack.extend((v, d + 1) for v in x)
        elif not numbers or x is None or isinstance(x, bool):
            continue
        elif isinstance(x, float):
            if not math.isfinite(x):
                raise JSONBoundsError(f"a number {x!r} (NaN, Infinity or past a float's range), which kvtui "
                                      "never writes")
        elif isinstance(x, int) and not -MAX_INT <= x <= MAX_INT:
            raise JSONBoundsError(f"an integer of {len(str(abs(x))):,} digits (at most ±2**64)")


def loads(text: str | bytes, max_depth: int = MAX_DEPTH, max_string: int = MAX_STRING,
          numbers: bool = True) -> object:
    """json.loads, bounded: JSONBoundsError (a ValueError) past the bounds, never RecursionError.
    `numbers=False` for files of other tools (a bench result may hold NaN): only depth and sizes."""
    import json

    try:
        doc = json.loads(text)
    except RecursionError:
        raise JSONBoundsError(f"nested more than {max_depth} levels deep") from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # the parser's own limit: an integer of more than 4,300 digits
        raise JSONBoundsError("an integer of more than 4,300 digits (at most ±2**64)") from None
    check_bounds(doc, max_depth, max_string, numbers)
    return doc


def longest_run_without(text: str, ch: str = '"') -> int:
    """The longest stretch of `text` without `ch` (C speed: str.find), what a hand-written scanner
    of JSON (salvaging a cut-short snapshot) would walk inside one string."""
    best = start = 0
    n = len(text)
    while start <= n:
        i = text.find(ch, start)
        if i < 0:
            i = n
        best = max(best, i - start)
        start = i + 1
    return best


# -- a server's answer that is not streamed ---------------------------------------------------
#
# A server's answer (/v1/models, /version, /tokenize, a quality prompt's completion) is untrusted
# input as a file is. httpx's Response.json() read the whole body, however large, and the
# parser's own limits escaped as RecursionError (an answer nested 100,000 deep) or a bare
# ValueError (an integer of 5,000 digits), and `.get` on an answer that was a list raised
# AttributeError: each a traceback out of an external engine's start or the token-space
# discovery. `fetch` reads at most MAX_ANSWER_BYTES and gives back an `Answer` whose `json()`
# raises ValueError and nothing else (bounded as `loads` bounds a file), and whose `field()` is
# None for any other shape.

MAX_ANSWER_BYTES = 8 << 20  # vLLM's largest such answer (a long completion with logprobs) is a few hundred kB


class Answer:
    """Duck-typed like the part of httpx.Response the callers use: status_code, text, json()."""

    def __init__(self, status_code: int, body: bytes, cut: bool = False):
        self.status_code = status_code
        self.body = body
        self.cut = cut  # more than MAX_ANSWER_BYTES came: the rest was not read

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The answer's JSON; ValueError (only) when it is not JSON within `loads`' bounds."""
        if self.cut:
            raise ValueError(f"an answer of more than {MAX_ANSWER_BYTES >> 20} MiB")
        try:
            return loads(self.body, numbers=False)  # another tool's numbers: NaN is the caller's to judge
        except RecursionError:  # loads maps it; belt and braces for a parser that does not
            raise ValueError("nested too deeply") from None

    def field(self, key: str) -> Any:
        """`key` of the answer when it is a JSON object, else None (never raises)."""
        try:
            doc = self.json()
        except ValueError:
            return None
        return doc.get(key) if isinstance(doc, dict) else None


def fetch(client: Any, method: str, url: str, *, total_s: float | None = None,
          stop: Callable[[], bool] | None = None, **kw: Any) -> Answer:
    """One request through `client`, its body read to at most MAX_ANSWER_BYTES, the whole of it
    (connect, headers, body) within `total_s` seconds when given (a client from `http_client`
    bounds every socket wait by it; any client's body loop is checked too), and cut within
    STOP_POLL_S of `stop()` turning true. Raises what the request raises (httpx.HTTPError; a
    deadline or a stop is an httpx.TimeoutException)."""
    import httpx

    if total_s is None:  # no deadline given: the client's read timeout bounds the whole answer
        t = kw.get("timeout", getattr(client, "timeout", None))
        t = getattr(t, "read", t)
        total_s = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
    parts: list[bytes] = []
    n = 0
    with total_deadline(total_s, stop):
        with client.stream(method, url, **kw) as r:
            for chunk in r.iter_bytes():
                n += len(chunk)
                if n > MAX_ANSWER_BYTES:
                    return Answer(r.status_code, b"".join(parts), cut=True)
                parts.append(chunk)
                why = _deadline_passed()
                if why:
                    raise httpx.ReadTimeout(why)
            return Answer(r.status_code, b"".join(parts))


# -- a total deadline for every read from a server ---------------------------------------------
#
# httpx's timeouts are per socket operation: a server that sends one byte every 2 s never trips a
# 10 s read timeout, and held `/health`, `/v1/models`, `/tokenize` and `/version` (and with them a
# run, past SIGTERM) for as long as it liked. `http_client` makes a client whose every socket wait
# (connect, each read, each write, TLS) is bounded by the deadline `total_deadline` sets for the
# calling thread, and wakes every STOP_POLL_S to ask the thread's stop: a request ends at its
# deadline, or within STOP_POLL_S of a stop, however the server trickles.

STOP_POLL_S = 0.25
_DL = threading.local()


@contextlib.contextmanager
def total_deadline(total_s: float | None, stop: Callable[[], bool] | None = None) -> Iterator[None]:
    """Within this block, every request of an `http_client` on this thread ends by `total_s` seconds
    from now (nested: the earlier deadline holds) and within STOP_POLL_S of `stop()` (or of the
    thread's stop: `thread_stop`)."""
    prev_dl, prev_stop = getattr(_DL, "deadline", None), getattr(_DL, "stop", None)
    if total_s is not None:
        end = clock.monotonic() + max(0.0, float(total_s))
        _DL.deadline = end if prev_dl is None else min(prev_dl, end)
    if stop is not None:
        _DL.stop = _either(prev_stop, stop)
    try:
        yield
    finally:
        _DL.deadline, _DL.stop = prev_dl, prev_stop


@contextlib.contextmanager
def thread_stop(stop: Callable[[], bool]) -> Iterator[None]:
    """Every request on this thread (a run's thread: its engine's probes, /health, /tokenize) ends
    within STOP_POLL_S of `stop()` turning true."""
    with total_deadline(None, stop):
        yield


def _either(a: Callable[[], bool] | None, b: Callable[[], bool]) -> Callable[[], bool]:
    return b if a is None else (lambda: bool(a()) or bool(b()))


def _deadline_passed() -> str | None:
    dl, stop = getattr(_DL, "deadline", None), getattr(_DL, "stop", None)
    if stop is not None:
        try:
            if stop():
                return "stopped: the run is stopping"
        except Exception:
            pass
    if dl is not None and clock.monotonic() >= dl:
        return "the answer's total deadline passed"
    return None


def _slice(timeout: float | None) -> tuple[float | None, float | None]:
    """(this wait's slice, the op's own end) for one socket wait of `timeout` seconds."""
    now = clock.monotonic()
    op_end = None if timeout is None else now + timeout
    ends = [x for x in (op_end, getattr(_DL, "deadline", None)) if x is not None]
    left = min(ends) - now if ends else None
    if getattr(_DL, "stop", None) is not None:
        left = STOP_POLL_S if left is None else min(left, STOP_POLL_S)
    return (None if left is None else max(0.0, left)), op_end


def _bounded(call: Callable[[float | None], Any], timeout: float | None, exc: type[BaseException]) -> Any:
    """Run one socket wait in slices: the deadline and the stop are asked between them."""
    while True:
        why = _deadline_passed()
        if why:
            raise exc(why)
        part, op_end = _slice(timeout)
        try:
            return call(part)
        except exc:
            if op_end is not None and clock.monotonic() >= op_end:
                raise  # the operation's own timeout
            why = _deadline_passed()
            if why:
                raise exc(why) from None
            if op_end is not None:
                timeout = max(0.0, op_end - clock.monotonic())


_TRANSPORT: Any = None


def _transport_class() -> Any:
    global _TRANSPORT
    if _TRANSPORT is not None:
        return _TRANSPORT
    import httpcore
    import httpx

    class _Stream(httpcore.NetworkStream):
        def __init__(self, inner: Any):
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return _bounded(lambda t: self._inner.read(max_bytes, t), timeout, httpcore.ReadTimeout)

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            _bounded(lambda t: self._inner.write(buffer, t), timeout, httpcore.WriteTimeout)

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                      timeout: float | None = None) -> Any:
            part, _ = _slice(timeout)
            return _Stream(self._inner.start_tls(ssl_context, server_hostname, part))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class _Backend(httpcore.NetworkBackend):
        def __init__(self) -> None:
            self._inner = httpcore.SyncBackend()

        def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                        socket_options: Any = None) -> Any:
            return _Stream(_bounded(lambda t: self._inner.connect_tcp(host, port, t, local_address, socket_options),
                                    timeout, httpcore.ConnectTimeout))

        def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
            return _Stream(_bounded(lambda t: self._inner.connect_unix_socket(path, t, socket_options),
                                    timeout, httpcore.ConnectTimeout))

        def sleep(self, seconds: float) -> None:
            self._inner.sleep(seconds)

    class DeadlineTransport(httpx.HTTPTransport):
        """httpx's own transport over a network backend whose every wait keeps the deadline."""

        def __init__(self, verify: Any = True, trust_env: bool = False, **kw: Any):
            super().__init__(verify=verify, trust_env=trust_env, **kw)
            limits = kw.get("limits") or httpx.Limits(max_connections=100, max_keepalive_connections=20,
                                                      keepalive_expiry=5.0)
            ssl_context = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
            self._pool = httpcore.ConnectionPool(
                ssl_context=ssl_context, max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry, http1=True, http2=False,
                network_backend=_Backend())

    _TRANSPORT = DeadlineTransport
    return _TRANSPORT


def http_client(*, trust_env: bool = False, limits: Any = None, **kw: Any) -> Any:
    """An httpx.Client whose requests keep `total_deadline` and `thread_stop` (every socket wait).
    Its own `timeout` stays the per-operation one. Redirects are not followed (a 3xx is an
    answer: kvtui.runtime.load.client refuses one to another origin the same way)."""
    import httpx

    transport = _transport_class()(trust_env=trust_env, **({"limits": limits} if limits is not None else {}))
    return httpx.Client(transport=transport, trust_env=trust_env, follow_redirects=False,
                        **({"limits": limits} if limits is not None else {}), **kw)
