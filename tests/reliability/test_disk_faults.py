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

from kvtui.io.snapshot.file import load_journal, load_snapshot

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


@pytest.mark.parametrize("which", ["run.json", "run.json.journal", "run.records.jsonl"])
def test_a_device_in_place_of_a_file_is_refused_at_the_start(tmp_path, knee_path, runs, which):
    """/dev/full (a character device) linked, or made (as root), where a file of the run goes: refused
    in one line before any server starts, and left as it was (kvtui.safeio: outputs are checked)."""
    (tmp_path / which).symlink_to("/dev/full")
    h = headless(tmp_path, knee_path)
    runs.append(h)
    _refused_at_start(h, h.wait(), f"{tmp_path / which}: cannot write the snapshot")
    assert os.readlink(tmp_path / which) == "/dev/full"


def test_records_file_swapped_for_a_full_device_mid_run_stops_the_run(tmp_path, knee_path, runs):
    """The records sidecar becomes unwritable while the run goes (here: swapped for a link to
    /dev/full once the engine starts, which the append refuses): the step stops, the run stops
    (measuring on without records would lose them), the snapshot says why, exit 1."""
    h = headless(tmp_path, knee_path)
    runs.append(h)
    wait_until(lambda: h.proc.poll() is not None or "starting the engine" in h.stdout(), 120, "the engine", h.proc)
    h.records.unlink(missing_ok=True)
    h.records.symlink_to("/dev/full")
    h.note_groups()
    rc = h.wait()
    out, err = h.stdout(), h.stderr()
    assert "Traceback" not in out + err
    assert f"kvtui: error: cannot append records to {h.records}: " in out and "symbolic link" in out
    assert rc == 1, out + err
    doc = load_snapshot(h.out)
    reason = doc["run"]["stop_reason"]
    assert doc["run"]["finished"] is False and reason.startswith("records file unwritable: ")
    (mode,) = doc["modes"]  # stopped: no further mode measured without records
    assert mode["steps"][-1]["aborted"] == reason
    assert mode["complete"] is False  # a resume measures it again
    assert not h.journal.exists()
    assert os.readlink(h.records) == "/dev/full"
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
