"""The run owns the only mutable document (issue 29 item 2).

The run thread writes its document (and a refit thread its modes' predictions); every other
thread reads `Run.published()`, a deep copy the run makes at each milestone. These tests hold
that: no module outside the run reaches the run's own document, and views rendered on another
thread while a run goes on read copies that share nothing with it and that no one writes.
"""

from __future__ import annotations

import ast
import json
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping

from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario
from kvtui.report.answer import build_answer
from kvtui.report.text import comparison_table
from kvtui.tui.state import RunState

ROOT = Path(__file__).resolve().parents[2] / "kvtui"
OWNER = ROOT / "explore" / "run.py"
PRIVATE = {"_doc", "_published"}  # the run's document and its last copy: the run's own attributes
CHEAP = ["ramp.window_s=4", "ramp.warmup_s=1", "workload.prompt_tokens=1024", "workload.output_tokens=48",
         "ramp.max=48"]


def _reads_of_the_runs_document(path: Path) -> list[str]:
    """`x._doc` / `x._published` on anything but `self` in the run, and `<run>.doc` anywhere."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in PRIVATE and not (path == OWNER and isinstance(node.value, ast.Name)
                                         and node.value.id == "self"):
            found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)}")
        if node.attr == "doc" and "run" in ast.unparse(node.value).lower():
            found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_the_runs_own_document():
    found = [hit for p in sorted(ROOT.rglob("*.py")) for hit in _reads_of_the_runs_document(p)]
    assert not found, "the run's document is the run's: read Run.published() instead\n" + "\n".join(found)
    run = Run(load_scenario("sim-demo", CHEAP), "unused.json", fast=True)
    assert not hasattr(run, "doc") and run.published() is None  # nothing published before the run starts


def _containers(x: Any) -> Iterator[int]:
    if isinstance(x, dict):
        yield id(x)
        for v in x.values():
            yield from _containers(v)
    elif isinstance(x, list):
        yield id(x)
        for v in x:
            yield from _containers(v)


def test_views_render_from_published_copies_while_the_run_writes_its_own(tmp_path):
    """The TUI's views (answer, comparison, export: all through RunState.export_doc), on this
    thread, while a run with a refit thread goes on on another: every copy they read is whole, is
    never written (by the run or by them), and shares no dict or list with the run's document."""
    sc = load_scenario("sim-demo", CHEAP)
    run = Run(sc, tmp_path / "run.json", modes=[m.name for m in sc.modes][:2], fast=True, refit=True)
    worker = threading.Thread(target=run.run, name="kvtui-run-under-test")
    worker.start()
    seen: list[tuple[Mapping[str, Any], str]] = []
    state = RunState()
    state.scenario = sc.to_dict()
    while True:
        alive = worker.is_alive()  # before the read: once the run is over, this read is its last copy
        pub = run.published()
        if pub is not None and not (seen and pub is seen[-1][0]):
            seen.append((pub, json.dumps(pub, sort_keys=True)))
            shown = state.export_doc(pub)  # what the answer screen, the comparison and the export start from
            build_answer(shown)
            comparison_table(shown)
        elif not alive:
            break
        else:
            worker.join(0.01)
    worker.join()

    final = run.published()
    assert final is not None and final["run"].get("finished") is True
    assert len(seen) > 4, "a milestone each: the run's start, each mode's start and end, each step"
    steps = [sum(len(m.get("steps") or []) for m in p["modes"]) for p, _ in seen]
    assert steps == sorted(steps) and steps[-1] > 0  # each copy is later than the one before
    for pub, at_sight in seen:  # no one wrote a published copy after it was made
        assert json.dumps(pub, sort_keys=True) == at_sight
    live = run._doc  # the run's own document, finished: only this test looks at it
    shared = set(_containers(live)).intersection(i for pub, _ in seen for i in _containers(pub))
    assert not shared, "a published copy shares a dict or list with the run's document"
    assert json.dumps(final, sort_keys=True) == json.dumps(live, sort_keys=True)  # the last copy is the document
