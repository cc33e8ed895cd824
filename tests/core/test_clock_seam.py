"""The clock seam holds (issue 46, step 1): no product module reads the time or sleeps but through
kvtui.clock, so that a test can drive every deadline, watchdog and window with a VirtualClock.

The guard reads every kvtui/**/*.py with ast (never imports it) and names file:line for each way
round the seam it knows: `time.monotonic` and its kin through `import time`, `import time as t`,
`from time import monotonic as m`, `from time import *`, `getattr(time, "sleep")`,
`__import__("time")`, `timeit.default_timer`; `datetime.now()`/`utcnow()`/`today()` and
`date.today()` however datetime came in; `time.strftime(fmt)`, `time.localtime()`, `time.gmtime()`, `time.ctime()` without an explicit
time (they read the clock themselves). A reference counts as much as a call: `now=time.monotonic`
captures the system's clock where the seam would read the current one at call time.

Left alone on purpose: asyncio's own loop (`asyncio.sleep`, `loop.time()`) and CPU-time counters
(`time.process_time`, `time.thread_time`): they are not the clock a deadline reads.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from kvtui import clock
from kvtui.clock import PacedClock, SystemClock, VirtualClock

ROOT = Path(__file__).resolve().parents[2]
KVTUI = ROOT / "kvtui"
SEAM = KVTUI / "clock.py"

# what reads the clock or waits on it, in the time module
TIME_READS = {"time", "monotonic", "perf_counter", "sleep", "monotonic_ns", "time_ns", "perf_counter_ns",
              "clock_gettime", "clock_gettime_ns"}
# these read the clock themselves when no time is given: (name, how many arguments make it explicit)
TIME_DEFAULTS_NOW = {"strftime": 2, "localtime": 1, "gmtime": 1, "ctime": 1, "asctime": 1}
# datetime classes' "now" readers
DATETIME_NOW = {"now", "utcnow", "today"}
DATETIME_CLASSES = {"datetime", "date"}


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dotted(node: ast.AST) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None when the head is not a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def violations(source: str, name: str = "<src>") -> list[str]:
    """Every way round the clock seam in one module's source, as 'name:line: what'."""
    tree = ast.parse(source, filename=name)
    time_mods: set[str] = set()  # names bound to the time module
    timeit_mods: set[str] = set()  # names bound to the timeit module (its default_timer is perf_counter)
    dt_mods: set[str] = set()  # names bound to the datetime module
    dt_classes: set[str] = set()  # names bound to datetime.datetime / datetime.date
    found: list[tuple[int, str]] = []

    for node in ast.walk(tree):  # first the bindings, wherever they are (a function's own import counts)
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "time":
                    time_mods.add(a.asname or "time")
                elif a.name == "datetime":
                    dt_mods.add(a.asname or "datetime")
                elif a.name == "timeit":
                    timeit_mods.add(a.asname or "timeit")
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for a in node.names:
                if node.module == "time":
                    if a.name == "*" or a.name in TIME_READS or a.name in TIME_DEFAULTS_NOW:
                        found.append((node.lineno, f"from time import {a.name}"))
                elif node.module == "timeit" and a.name in ("*", "default_timer"):
                    found.append((node.lineno, f"from timeit import {a.name}"))
                elif node.module == "datetime":
                    if a.name == "*":
                        found.append((node.lineno, "from datetime import *"))
                    elif a.name in DATETIME_CLASSES:
                        dt_classes.add(a.asname or a.name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            path = _dotted(node)
            if path is None:
                continue
            if len(path) == 2 and path[0] in time_mods and path[1] in TIME_READS:
                found.append((node.lineno, ".".join(path)))
            elif len(path) == 2 and path[0] in timeit_mods and path[1] == "default_timer":
                found.append((node.lineno, ".".join(path)))
            elif len(path) == 2 and path[0] in dt_classes and path[1] in DATETIME_NOW:
                found.append((node.lineno, ".".join(path)))
            elif (len(path) == 3 and path[0] in dt_mods and path[1] in DATETIME_CLASSES
                  and path[2] in DATETIME_NOW):
                found.append((node.lineno, ".".join(path)))
        elif isinstance(node, ast.Call):
            f = node.func
            path = _dotted(f)
            n_args = len(node.args) + len(node.keywords)
            if (path is not None and len(path) == 2 and path[0] in time_mods and path[1] in TIME_DEFAULTS_NOW
                    and n_args < TIME_DEFAULTS_NOW[path[1]]):
                found.append((node.lineno, f"{'.'.join(path)}() without a time (give it clock.time())"))
            if isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) >= 2:
                target, attr = _dotted(node.args[0]), _const_str(node.args[1])
                if target is not None and len(target) == 1 and target[0] in time_mods | dt_classes:
                    found.append((node.lineno, f"getattr({target[0]}, {attr!r})"))
            if (path in (["__import__"], ["importlib", "import_module"], ["import_module"]) and node.args
                    and _const_str(node.args[0]) in ("time", "datetime")):
                found.append((node.lineno, f"{'.'.join(path or [])}({_const_str(node.args[0])!r})"))
    return [f"{name}:{line}: {what}" for line, what in sorted(set(found))]


def _product_files() -> list[Path]:
    return sorted(p for p in KVTUI.rglob("*.py") if p != SEAM)


def test_no_product_module_reads_the_time_but_through_the_seam():
    bad: list[str] = []
    for p in _product_files():
        bad += violations(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    assert not bad, ("read the time through kvtui.clock (`from kvtui import clock`; clock.monotonic(), "
                     "clock.time(), clock.sleep()):\n" + "\n".join(bad))


def test_the_guard_reads_every_module():
    files = _product_files()
    assert len(files) > 100 and KVTUI / "safeio.py" in files and KVTUI / "runtime" / "load" / "generator.py" in files


@pytest.mark.parametrize("src", [
    "import time\nt = time.monotonic()",
    "import time\ntime.sleep(1)",
    "import time\nx = time.time()",
    "import time\nx = time.perf_counter()",
    "import time\nx = time.monotonic_ns()",
    "import time\nx = time.time_ns()",
    "import time as t\nx = t.monotonic()",
    "from time import monotonic\nx = monotonic()",
    "from time import monotonic as m\nx = m()",
    "from time import sleep as nap",
    "from time import *",
    "import time\ndef f(now=time.monotonic):\n    return now()",
    "import time\nCLOCK = time.time",
    "import time\nf = getattr(time, 'sleep')",
    "t = __import__('time')",
    "import importlib\nt = importlib.import_module('time')",
    "def f():\n    import time\n    return time.monotonic()",
    "import time\nstamp = time.strftime('%Y')",
    "import time\nstamp = time.strftime('%Y', time.localtime())",
    "import time\nx = time.gmtime()",
    "import time\nx = time.clock_gettime(time.CLOCK_MONOTONIC)",
    "from timeit import default_timer",
    "import timeit\nx = timeit.default_timer()",
    "from datetime import datetime\nnow = datetime.now",
    "from time import strftime",
    "from datetime import datetime\nx = datetime.now()",
    "from datetime import datetime\nx = datetime.utcnow()",
    "from datetime import date\nx = date.today()",
    "from datetime import datetime as D\nx = D.now()",
    "import datetime\nx = datetime.datetime.now()",
    "import datetime as dt\nx = dt.date.today()",
    "import datetime as dt\nx = dt.datetime.now(dt.timezone.utc)",
])
def test_the_guard_sees_each_way_round(src):
    assert violations(src), src


@pytest.mark.parametrize("src", [
    "from kvtui import clock\nx = clock.monotonic()",
    "from kvtui import clock\nclock.sleep(1)",
    "import time\nstamp = time.strftime('%Y', time.gmtime(clock.time()))",
    "import time\nx = time.gmtime(0)",
    "import time\nx = time.process_time()",
    "import asyncio\nasync def f():\n    await asyncio.sleep(1)",
    "from datetime import datetime\nx = datetime.fromisoformat('2026-01-01')",
    "from datetime import datetime\nx = datetime.fromtimestamp(clock.time())",
    "time = 3\nx = time",
    "class A:\n    def time(self):\n        return self.time",
])
def test_the_guard_leaves_the_seam_alone(src):
    assert not violations(src), src


def test_the_guard_names_file_and_line():
    assert violations("import os\nimport time\n\nx = time.monotonic()\n", "kvtui/x.py") == [
        "kvtui/x.py:4: time.monotonic"]


# --- kvtui/clock.py itself ----------------------------------------------------------------------

def test_system_clock_is_the_default_and_reads_the_host():
    import time as host
    assert isinstance(clock.current(), SystemClock)
    a = host.monotonic()
    b = clock.monotonic()
    assert a <= b <= host.monotonic()
    assert abs(clock.time() - host.time()) < 5
    assert clock.perf_counter() <= host.perf_counter()


def test_virtual_clock_moves_only_when_told():
    vc = VirtualClock(start=10.0, epoch=2_000_000_000.0)
    assert vc.monotonic() == 10.0 and vc.time() == 2_000_000_000.0 and vc.perf_counter() == 10.0
    assert vc.advance(2.5) == 12.5
    vc.sleep(30)  # returns at once
    assert vc.monotonic() == 42.5 and vc.time() == 2_000_000_032.5
    vc.sleep(0)
    vc.sleep(-1)  # a negative sleep is no sleep, as a deadline already passed would ask
    assert vc.monotonic() == 42.5
    with pytest.raises(ValueError):
        vc.advance(-1)


def test_virtual_clock_is_shared_by_threads():
    vc = VirtualClock(start=0.0)

    def sleeper():
        for _ in range(1000):
            vc.sleep(0.001)

    threads = [threading.Thread(target=sleeper) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert vc.monotonic() == pytest.approx(8.0)


def test_use_swaps_and_restores_even_on_an_exception():
    vc = VirtualClock(start=5.0)
    with clock.use(vc) as got:
        assert got is vc and clock.current() is vc
        assert clock.monotonic() == 5.0 and clock.perf_counter() == 5.0
        clock.sleep(3)
        assert clock.monotonic() == 8.0 and vc.monotonic() == 8.0
    assert isinstance(clock.current(), SystemClock)
    with pytest.raises(RuntimeError):
        with clock.use(vc):
            raise RuntimeError("boom")
    assert isinstance(clock.current(), SystemClock)
    with clock.use(vc):  # nested: the inner block's clock, then the outer's again
        inner = VirtualClock(start=100.0)
        with clock.use(inner):
            assert clock.monotonic() == 100.0
        assert clock.current() is vc
    assert isinstance(clock.current(), SystemClock)


def test_a_thread_reads_the_clock_in_use():
    seen: list[float] = []
    with clock.use(VirtualClock(start=77.0)):
        t = threading.Thread(target=lambda: seen.append(clock.monotonic()))
        t.start()
        t.join()
    assert seen == [77.0]


class _RecordingClock:
    """A stand-in for the wall under a PacedClock: records what it was asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def time(self) -> float:
        return 1_700_000_000.0 + self.t

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.t += seconds


def test_paced_clock_waits_dt_over_speed_on_its_real_clock():
    real = _RecordingClock()
    pc = PacedClock(speed=4.0, real=real, start=0.0)
    pc.sleep(2.0)
    pc.sleep(1.0)
    assert real.waits == [0.5, 0.25]
    assert pc.monotonic() == 3.0
    assert pc.time() == pytest.approx(1_700_000_003.0)  # its epoch starts at the real clock's time
    pc.sleep(0)
    assert real.waits == [0.5, 0.25]


def test_paced_clock_jump_stops_waiting_but_time_still_moves():
    real = _RecordingClock()
    pc = PacedClock(speed=1.0, real=real)
    pc.sleep(1.0)
    pc.jump()
    pc.sleep(100.0)
    pc.sleep(50.0)
    assert real.waits == [1.0]
    assert pc.monotonic() == 151.0  # the same virtual time as if it had waited


def test_paced_clock_on_the_host_waits_for_real():
    import time as host
    pc = PacedClock(speed=100.0)
    t0 = host.monotonic()
    pc.sleep(2.0)  # 20 ms on the wall
    assert host.monotonic() - t0 >= 0.019
    assert pc.monotonic() == 2.0
