"""The classic protocol was retired (issue 46): a new run refuses `ramp.protocol = "classic"` in one
line naming the file and field (exit 2), a resume of a snapshot measured with it is refused, and
the old snapshots measured with it (those from before ramp.protocol existed: docs/results/h200-v2)
still replay, export, diff and re-evaluate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtui.cli.entry import main
from kvtui.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
OLD = RESULTS / "h200-v2.json"  # measured the classic way: written before ramp.protocol existed
NEW = RESULTS / "h200-cont.json"  # measured with the continuous protocol
RECORDS = ROOT / "tests" / "fixtures" / "records"
RETIRED = "the classic protocol was retired (issue 46)"


@pytest.mark.parametrize("how", ["toml", "set"])
def test_a_new_run_refuses_the_classic_protocol_in_one_line_naming_the_field(tmp_path, capsys, how):
    out = tmp_path / "out.json"
    if how == "toml":
        src = tmp_path / "old.toml"
        src.write_text('[ramp]\nprotocol = "classic"\n')
        argv, where = [str(src)], f"{src}:2: ramp.protocol: "
    else:
        argv, where = ["sim-demo", "--set", "ramp.protocol=classic"], "--set ramp.protocol=classic: ramp.protocol: "
    assert main(["run", *argv, "--fast", "--headless", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and where in err and RETIRED in err, err
    assert "'continuous'" in err and "replay, export, diff and re-evaluate" in err
    assert not out.exists()  # nothing ran


def test_a_run_given_the_classic_protocol_in_code_is_refused_too(tmp_path):
    """A scenario changed after loading (a bench, a test) cannot measure the retired way either: it
    would measure the continuous way under the classic name."""
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario

    sc = load_scenario("sim-demo")
    sc.ramp.protocol = "classic"
    with pytest.raises(UsageError, match=r"sim-demo\.toml: ramp\.protocol: the classic protocol was retired"):
        Run(sc, tmp_path / "out.json", fast=True)
    assert not (tmp_path / "out.json").exists()


def test_the_continuous_protocol_is_still_accepted_by_name():
    from kvtui.io.scenario.loader import scenario_from_dict

    assert scenario_from_dict({"ramp": {"protocol": "continuous"}}, source="s.toml").ramp.protocol == "continuous"


def test_a_snapshot_measured_classic_still_runs_whatif_and_calibrate_with_todays_protocol():
    """What is run from a snapshot (whatif, calibrate) measures with today's protocol, as from one
    written before the field existed; a --set of the retired value is still refused."""
    from kvtui.errors import ScenarioError
    from kvtui.io.scenario.loader import scenario_from_snapshot

    assert scenario_from_snapshot({"ramp": {"protocol": "classic"}}).ramp.protocol == "continuous"
    with pytest.raises(ScenarioError, match=r"ramp\.protocol: the classic protocol was retired"):
        scenario_from_snapshot({"ramp": {"protocol": "continuous"}}, overrides=["ramp.protocol=classic"])


def _load(path: Path) -> dict:
    from kvtui.io.snapshot.file import load_snapshot

    return load_snapshot(path)


def test_a_resume_of_a_snapshot_measured_classic_is_refused_in_one_line(tmp_path, capsys):
    from kvtui.explore.resume_guard import check_resumable, retired_protocol
    from kvtui.io.scenario import load_scenario

    sc = load_scenario("sim-demo").to_dict()
    assert retired_protocol(_load(NEW)) is None
    old = _load(OLD)
    with pytest.raises(UsageError) as e:
        check_resumable(sc, [old])
    msg = str(e.value)
    assert "\n" not in msg and f"--resume {old['_path']}" in msg, msg
    assert "ramp.protocol = 'classic' there, written before ramp.protocol existed" in msg
    assert "retired (issue 46)" in msg and "run afresh" in msg
    said = _load(NEW)
    said["scenario"]["ramp"]["protocol"] = "classic"  # a run made with --set ramp.protocol=classic
    with pytest.raises(UsageError, match=r"ramp\.protocol = 'classic' there: its steps were measured with the classic"):
        check_resumable(sc, [said])
    step = _load(NEW)
    step["modes"][0]["steps"][-1]["protocol"] = "classic"
    with pytest.raises(UsageError, match=r"step protocol = 'classic'"):
        check_resumable(sc, [step])
    # The command line: exit 2, one line, nothing written.
    out = tmp_path / "out.json"
    assert main(["run", "sim-demo", "--fast", "--headless", "--resume", str(OLD), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--resume" in err and "retired (issue 46)" in err, err
    assert not out.exists()


def test_an_old_classic_snapshot_still_replays_exports_diffs_and_reevaluates(tmp_path, capsys):
    from kvtui.explore.reevaluate import reevaluate_modes
    from kvtui.io.scenario.slo_table import slo_of
    from kvtui.report.answer import answer_text

    doc = _load(OLD)
    assert "protocol" not in doc["scenario"]["ramp"]
    assert doc["modes"][0]["name"] in answer_text(doc)  # kvtui replay's answer on a plain terminal
    md = tmp_path / "old.md"
    assert main(["export", str(OLD), "--format", "md", "--out", str(md)]) == 0
    assert all(m["name"] in md.read_text() for m in doc["modes"])
    assert main(["export", str(OLD), "--format", "json", "--out", str(tmp_path / "old.json")]) == 0
    assert json.loads((tmp_path / "old.json").read_text())["modes"]
    capsys.readouterr()
    assert main(["diff", str(OLD), str(NEW)]) == 0
    assert capsys.readouterr().out.strip()
    # Re-evaluated from its records under its own SLO (the replay's SLO edit): every verdict as stored.
    awq = next(m for m in doc["modes"] if m["name"] == "awq-int4+fp8-kv")
    got, problems = reevaluate_modes([(awq["name"], awq["steps"], RECORDS / "h200-v2.records.jsonl")],
                                     slo_of(doc["scenario"]))
    assert not problems, problems
    kept = [s for s in awq["steps"] if not s.get("aborted")]
    assert kept and all(got[awq["name"]][s["index"]]["passed"] == s["passed"] for s in kept)
