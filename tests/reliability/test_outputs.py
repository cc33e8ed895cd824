"""Outputs are checked like inputs (issue #30, class 1): every path kvtui writes must be a
regular file or not exist yet; a FIFO, a device, a directory, a socket or a symlink is refused
in one line, exit 2, before anything runs, and is never replaced.

Run as root (CI is) a character device is made with os.mknod in tmp_path (major 1 minor 3,
what /dev/null is), never the real /dev/null. Not root: those cases skip, the rest run.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui import safeio
from kvtui.cli.entry import main
from kvtui.errors import UsageError

ROOT = os.geteuid() == 0
SCENARIO = """
name = "outs"
[server]
engine = "sim"
[[modes]]
name = "first"
[workload]
prompt_tokens = 64
output_tokens = 16
[ramp]
start = 1
max = 4
warmup_s = 0.2
window_s = 1
[slo]
tpot_p95_ms = 35
"""

KINDS = ["fifo", "chardev", "directory", "socket", "link_to_regular", "link_dangling", "link_to_device"]


def make(kind: str, p: Path) -> None:
    """A node of `kind` at `p`."""
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "chardev":
        if not ROOT:
            pytest.skip("a device node needs root (CI runs as root)")
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "directory":
        p.mkdir()
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(p.parent)  # a relative bind: a long tmp path would pass the 108-byte limit
        try:
            s.bind(p.name)
        finally:
            os.chdir(cwd)
        s.close()
    elif kind == "link_to_regular":
        target = p.with_name(p.name + ".target")
        target.write_text("keep me\n")
        p.symlink_to(target)
    elif kind == "link_dangling":
        p.symlink_to(p.with_name("nowhere"))
    elif kind == "link_to_device":
        if not ROOT:
            pytest.skip("a device node needs root (CI runs as root)")
        dev = p.with_name(p.name + ".dev")
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        p.symlink_to(dev)
    else:
        raise AssertionError(kind)


def fingerprint(folder: Path) -> dict[str, tuple]:
    """Every entry's kind, inode, device number, size and link target: what 'unchanged' means."""
    out = {}
    for e in sorted(folder.iterdir()):
        s = os.lstat(e)
        out[e.name] = (stat.S_IFMT(s.st_mode), s.st_ino, s.st_rdev, s.st_size,
                       os.readlink(e) if e.is_symlink() else None)
    return out


# Every option that names a path kvtui writes: (name, argv builder, the path the node goes at).
def _scenario(d: Path) -> Path:
    p = d / "s.toml"
    p.write_text(SCENARIO)
    return p


def _snapshot(d: Path) -> Path:
    """A snapshot file to read (a minimal valid one: the refusal comes before it is read)."""
    p = d / "in.json"
    p.write_text('{"schema": "kvtui.snapshot/1", "modes": []}')
    return p


OPTIONS = {
    "run --out": lambda d, t: (["run", str(_scenario(d)), "--headless", "--fast", "--out", str(t)], t),
    "run journal sidecar": lambda d, t: (["run", str(_scenario(d)), "--headless", "--fast", "--out", str(d / "r.json")],
                                         d / "r.json.journal"),
    "run records sidecar": lambda d, t: (["run", str(_scenario(d)), "--headless", "--fast", "--out", str(d / "r.json")],
                                         d / "r.records.jsonl"),
    "tui --out": lambda d, t: (["tui", str(_scenario(d)), "--out", str(t)], t),
    "export --out": lambda d, t: (["export", str(_snapshot(d)), "--format", "md", "--out", str(t)], t),
    "export --out --force": lambda d, t: (["export", str(_snapshot(d)), "--format", "csv", "--force", "--out", str(t)],
                                          t),
    "diff --out": lambda d, t: (["diff", str(_snapshot(d)), str(_snapshot(d)), "--out", str(t)], t),
    "import --out": lambda d, t: (["import", str(_snapshot(d)), "--out", str(t)], t),
    "calibrate --out": lambda d, t: (["calibrate", str(_snapshot(d)), "--out", str(t)], t),
    "init --out": lambda d, t: (["init", "qwen3-0.6b", "--out", str(t)], t),
    "init --out --force": lambda d, t: (["init", "qwen3-0.6b", "--force", "--out", str(t)], t),
    "model build lock": lambda d, t: (["model", "build", "smollm2-135m-instruct", "--dir", str(d)],
                                      d / ".smollm2-135m-instruct.lock"),
    "whatif --out": lambda d, t: (["whatif", str(_snapshot(d)), "--out", str(t)], t),
}


def run_main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = int(e.code or 0)
    return rc, err.getvalue()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_output_option_refuses_every_non_regular_kind(tmp_path: Path, option: str, kind: str) -> None:
    d = tmp_path / "w"
    d.mkdir()
    argv, node = OPTIONS[option](d, d / "target.out")
    make(kind, node)
    before = fingerprint(d)
    rc, err = run_main(argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (option, kind, err)
    assert len(lines) == 1, err
    assert node.name in lines[0] and ("regular file" in lines[0] or "directory" in lines[0]), lines[0]
    # Nothing replaced, nothing created beside it (no snapshot, no records sidecar, no temp file).
    assert fingerprint(d) == before


@pytest.mark.parametrize("kind", ["fifo", "chardev"])
def test_a_run_as_root_never_replaces_a_device_or_fifo_in_a_subprocess(tmp_path: Path, kind: str) -> None:
    """The whole CLI, as a user starts it: `kvtui run --out NODE` leaves the node as it was."""
    import subprocess
    import sys

    node = tmp_path / "node"
    make(kind, node)
    before = fingerprint(tmp_path)
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", str(_scenario(tmp_path)), "--headless", "--fast",
                        "--out", str(node)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert p.returncode == 2, p.stderr
    after = fingerprint(tmp_path)
    assert after.pop("s.toml") and before.pop("s.toml", None) is None
    assert after == before  # no records sidecar beside it


# -- the floor functions, over every kind ------------------------------------------------------

WRITERS = ["check_output", "open_append", "open_write", "atomic_write"]


@settings(max_examples=120, deadline=None)
@given(kind=st.sampled_from(KINDS), writer=st.sampled_from(WRITERS),
       name=st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd")), min_size=1, max_size=12))
def test_safeio_writers_refuse_every_non_regular_kind(kind: str, writer: str, name: str) -> None:
    if not ROOT and kind in ("chardev", "link_to_device"):
        return
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / name
        make(kind, p)
        before = fingerprint(Path(tmp))
        with pytest.raises(UsageError) as e:
            if writer == "check_output":
                safeio.check_output(p)
            elif writer == "open_append":
                safeio.open_append(p).close()
            elif writer == "open_write":
                safeio.open_write(p).close()
            else:
                safeio.atomic_write(p, "x")
        assert str(p) in str(e.value) and "\n" not in str(e.value)
        assert fingerprint(Path(tmp)) == before


@pytest.mark.parametrize("writer", WRITERS)
def test_an_absent_path_or_a_regular_file_is_written(tmp_path: Path, writer: str) -> None:
    for p in (tmp_path / "new", tmp_path / "old"):
        if p.name == "old":
            p.write_text("old\n")
        if writer == "check_output":
            assert safeio.check_output(p) == p
        elif writer == "open_append":
            with safeio.open_append(p) as f:
                f.write("more\n")
            assert p.read_text().endswith("more\n")
        elif writer == "open_write":
            with safeio.open_write(p) as f:
                f.write(b"new\n")
            assert p.read_text() == "new\n"
        else:
            safeio.atomic_write(p, "new\n")
            assert p.read_text() == "new\n" and stat.S_IMODE(p.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["fifo", "chardev", "directory", "link_dangling"])
def test_the_atomic_replace_rechecks_a_target_that_changed_while_writing(tmp_path: Path, kind: str,
                                                                         monkeypatch) -> None:
    """A node put at the target between the first check and the rename (a race a real part cannot
    be made to lose on demand: os.fsync is where it is planted) is refused, the temp file removed."""
    target = tmp_path / "out.json"
    real = os.fsync

    def plant(fd: int) -> None:
        real(fd)
        if not os.path.lexists(target):
            make(kind, target)

    monkeypatch.setattr(safeio.os, "fsync", plant)
    with pytest.raises(UsageError, match="not a regular file"):
        safeio.atomic_write(target, "data")
    monkeypatch.setattr(safeio.os, "fsync", real)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert os.path.lexists(target) and not (target.is_file() and not target.is_symlink())


def test_open_append_refuses_a_fifo_without_waiting_for_a_reader(tmp_path: Path) -> None:
    """O_NONBLOCK: a FIFO never blocks the writer's open (it is refused by the check, or by ENXIO)."""
    p = tmp_path / "f"
    os.mkfifo(p)
    with pytest.raises(UsageError, match="FIFO"):
        safeio.open_append(p)


# -- a device node where no root is needed: a user namespace ----------------------------------
#
# Not root (a developer's machine), mknod is refused, so the device cases above skip. In a user
# and mount namespace (`unshare -Urm`, no privilege needed where the kernel allows it) the
# system's /dev/null can be bind-mounted onto a file in tmp: a real character device node at a
# path kvtui is told to write. This runs as root too (CI), so the same proof runs everywhere.

_DRIVER = r'''
import json, os, stat, subprocess, sys
node, argv = sys.argv[1], json.loads(sys.argv[2])
open(node, "w").close()
subprocess.run(["mount", "--bind", "/dev/null", node], check=True)
def kind(p):
    s = os.lstat(p)
    return [stat.S_IFMT(s.st_mode), s.st_rdev, s.st_ino]
before = kind(node)
folder = os.path.dirname(node)
listing = sorted(os.listdir(folder))
p = subprocess.run([sys.executable, "-m", "kvtui", *argv], capture_output=True, text=True, timeout=120)
print(json.dumps({"rc": p.returncode, "err": p.stderr, "before": before, "after": kind(node),
                  "listing_before": listing, "listing_after": sorted(os.listdir(folder))}))
'''


def _userns() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _userns(), reason="no user namespaces here (unshare -Urm refused)")
@pytest.mark.parametrize("option", ["run --out", "run journal sidecar", "run records sidecar", "export --out",
                                    "diff --out", "import --out", "calibrate --out", "init --out --force"])
def test_in_a_user_namespace_a_device_node_is_never_replaced(tmp_path, option) -> None:
    import json
    import subprocess
    import sys

    d = tmp_path / "w"
    d.mkdir()
    argv, node = OPTIONS[option](d, d / "target.out")
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.run(["unshare", "-Urm", sys.executable, str(driver), str(node), json.dumps([str(a) for a in argv])],
                       capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["before"][0] == stat.S_IFCHR and res["before"][1] == os.makedev(1, 3), res
    assert res["rc"] == 2 and "character device" in res["err"], res["err"][-2000:]
    assert res["after"] == res["before"]  # the same node, not a file put in its place
    assert res["listing_after"] == res["listing_before"]  # no sidecar, no temp file beside it
