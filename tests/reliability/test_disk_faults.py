"""The snapshot's disk fails: an unwritable place for it, a full device at the start, a full disk mid-run.

The tests run as root here, and root writes through chmod, so "unwritable" is made in ways
that stop root too: a regular file where the snapshot's directory should be, a path under
/proc, /dev/full (every write: ENOSPC) in place of a file, and a real tmpfs filled to the
last byte while the run goes (when this machine lets the test mount one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from kvtui.snapshot.file import load_journal, load_snapshot

from reliability_helpers import headless, journal_steps, wait_until


def _refused_at_start(h, rc: int, words: str) -> None:
    err = h.stderr()
    assert rc == 2, h.stdout() + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvtui: ") and words in lines[0], err
    assert "starting the engine" not in h.stdout()  # refused before any server was started
    assert h.leftovers() == []


def test_snapshot_directory_is_a_file(tmp_path, knee_path, runs):
    blocker = tmp_path / "results"
    blocker.write_text("a file where the directory should be\n")
    h = headless(tmp_path, knee_path, out=blocker / "run.json")
    runs.append(h)
    _refused_at_start(h, h.wait(), f"{blocker / 'run.json'}: cannot write the snapshot: ")


def test_snapshot_directory_cannot_be_created(tmp_path, knee_path, runs):
    h = headless(tmp_path, knee_path, out=Path("/proc/kvtui-no-such-dir") / "run.json")
    runs.append(h)
    _refused_at_start(h, h.wait(), "/proc/kvtui-no-such-dir/run.json: cannot write the snapshot: ")


def test_full_device_at_the_start(tmp_path, knee_path, runs):
    (tmp_path / "run.json.journal").symlink_to("/dev/full")  # the journal's first write: ENOSPC
    h = headless(tmp_path, knee_path)
    runs.append(h)
    _refused_at_start(h, h.wait(), "No space left on device")


def test_records_file_on_a_full_device_stops_the_run(tmp_path, knee_path, runs):
    """The records sidecar fails (ENOSPC) as the first records stream in: the step stops, the
    run stops (measuring on without records would lose them), the snapshot says why, exit 1."""
    (tmp_path / "run.records.jsonl").symlink_to("/dev/full")
    h = headless(tmp_path, knee_path)
    runs.append(h)
    wait_until(lambda: h.proc.poll() is not None or "starting the engine" in h.stdout(), 120, "the engine", h.proc)
    h.note_groups()
    rc = h.wait()
    out, err = h.stdout(), h.stderr()
    assert "Traceback" not in out + err
    assert f"kvtui: error: cannot append records to {h.records}: No space left on device" in out
    assert rc == 1, out + err
    doc = load_snapshot(h.out)
    reason = "records file unwritable: No space left on device"
    assert doc["run"]["finished"] is False and doc["run"]["stop_reason"] == reason
    (mode,) = doc["modes"]  # stopped: no further mode measured without records
    assert [s["aborted"] for s in mode["steps"]] == [reason]
    assert mode["complete"] is False  # a resume measures it again
    assert not h.journal.exists()
    assert h.leftovers() == []


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], capture_output=True)
    return r.returncode == 0


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
    if os.geteuid() != 0 or shutil.which("mount") is None or not _mount_tmpfs(mnt, "4m"):
        pytest.skip("needs root and mount(8) to make a real small filesystem (tmpfs)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(fs: Path) -> None:
    """Write until the filesystem has not one byte left (ENOSPC)."""
    fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


def test_disk_fills_up_mid_run(tmp_path, knee_path, runs, small_fs):
    """A real filesystem runs out of space after the first step: kvtui stops cleanly, names the
    problem and the journal, and the journal still holds every step finished before."""
    out = small_fs / "run.json"
    h = headless(tmp_path, knee_path, out=out)
    runs.append(h)
    wait_until(lambda: journal_steps(h.journal), 120, "a step journaled", h.proc)
    h.note_groups()
    _fill(small_fs)
    kept = journal_steps(h.journal)
    rc = h.wait()
    out_text, err = h.stdout(), h.stderr()
    assert "Traceback" not in out_text + err, err
    assert rc == 1, out_text + err
    assert "No space left on device" in out_text + err
    assert f"finished steps are in {h.journal}" in err  # where to find what was measured
    assert not out.exists()  # never half a snapshot
    assert h.leftovers() == []
    # Space freed: the journal replays, every step finished before the disk filled is there.
    (small_fs / "filler").unlink()
    doc = load_journal(h.journal)
    got = [(m["name"], s["index"]) for m in doc["modes"] for s in m["steps"]]
    assert set(kept) <= set(got) and got
