"""`kvtui run SCENARIO.toml [--headless] [--mode NAME]… [--out PATH] [--set KEY=VALUE]… [--resume SNAPSHOT]…`."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

from kvtui.explore.events import Event, check_kind
from kvtui.report.paths import default_out, file_stem  # noqa: F401 - also this module's names for them


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run", help="run a scenario (headless or in the TUI)",
        description="Start the engine per precision mode, ramp the load, find the max concurrency at the SLO.",
    )
    p.add_argument("scenario", nargs="?", help="scenario file (default: the built-in simulated demo)")
    p.add_argument("--headless", action="store_true", help="no TUI: a progress line per step and a summary")
    p.add_argument("--mode", action="append", dest="modes", metavar="NAME", help="run only this mode (repeatable)")
    p.add_argument("--out", help="snapshot path (default: runs/<scenario>-<time>.json)")
    p.add_argument("--set", action="append", dest="overrides", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, e.g. --set ramp.max=64 --set slo.ttft_p95_ms=1500")
    p.add_argument("--resume", action="append", metavar="SNAPSHOT",
                   help="keep the finished modes of this snapshot (or journal), continue the ones cut short from their "
                        "finished steps, run the rest; repeatable (a later snapshot's mode wins)")
    p.add_argument("--engine", choices=["sim", "vllm", "external"], help="override server.engine")
    p.add_argument("--fast", action="store_true", help="with the sim engine: simulate each step offline (seconds, no HTTP)")
    p.add_argument("--verbose", "-v", action="store_true", help="headless: print the server's log too")
    p.add_argument("--theme", help="TUI theme")
    p.add_argument("--allow-env", action="store_true",
                   help="let the scenario's server.env set variables that change which code the server runs "
                        "(PYTHONPATH, LD_PRELOAD, …); refused otherwise")
    p.add_argument("--kill-stale", action="store_true",
                   help="stop servers an earlier, killed kvtui run left running (otherwise: a warning, or a question on a terminal)")
    p.set_defaults(func=run)
    return p


def _fmt(x: Any, unit: str = "", digits: int = 0) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:,.{digits}f}{unit}"


def step_line(mode: str, step: dict[str, Any], slo_targets: list[tuple[str, str, float]]) -> str:
    kind = "c" if step.get("load_kind", "concurrency") == "concurrency" else "rate"
    verdict = {True: "PASS", False: "FAIL", None: "UNDECIDED"}[step["passed"]]
    if step.get("cut"):
        verdict = f"CUT SHORT ({step.get('aborted')}): no verdict"
    parts = [f"[{mode}] {kind}={step['load']:g}", f"n={step['requests']}", f"{_fmt(step['output_tok_s'])} tok/s"]
    shown = {("ttft", "p95"), ("tpot", "p95")} | {(m, p) for m, p, _ in slo_targets}
    for m, p in sorted(shown, key=lambda x: ("ttft", "tpot", "itl", "e2e").index(x[0])):
        v = step[f"{m}_ms"].get(p)
        parts.append(f"{m.upper()} {p} {_fmt(v, ' ms', 1)}")
    if step["errors"]:
        parts.append(f"errors {step['errors']}")
    if step.get("kv_cache_usage_max") is not None:
        parts.append(f"KV {step['kv_cache_usage_max']:.0%}")
    if step.get("preemptions"):
        parts.append(f"preempt {step['preemptions']:g}")
    from kvtui.explore.evaluate import LIMIT_WORDS, in_lock_step

    if in_lock_step(step):
        parts.append(f"lock-step {step['send_burst']:.0%}")

    if step.get("flags"):
        # Named doubts (untrusted server numbers, the client's own failures): never hidden.
        parts.append("FLAGS " + ", ".join(f"{k}={v}" for k, v in sorted(step["flags"].items())))
    lim = LIMIT_WORDS.get(step.get("limited_by") or "", step.get("limited_by"))
    parts.append(verdict + (f" (limited by {lim})" if step.get("limited_by") else ""))
    if step.get("why") == "confirm":
        parts.append("[confirm]")
    if step.get("resumed"):
        parts.append("[kept from the resumed run]")
    return "  ".join(parts)


class HeadlessPrinter:
    def __init__(self, scenario, out: TextIO = sys.stdout, verbose: bool = False):
        self.scenario = scenario
        self.out = out
        self.verbose = verbose
        self.label = ""
        self.done: list[dict[str, Any]] = []  # finished modes, for the quality lines' reference

    def __call__(self, ev: Event) -> None:
        # Any object with kind, mode and data will do (kvtui.explore.events gives them typed);
        # a kind no one declared is refused, never passed over.
        from kvtui.terminal import printable

        k = ev.kind
        check_kind(k)

        def w(text: str) -> None:  # names, server logs and errors come from files and servers: no escapes
            self.out.write(printable(text))
        if k == "run_started":
            env = ev.data["environment"]
            sim = " SIMULATED" if env.get("simulated") else ""
            gpus = ", ".join(env.get("gpu_names") or []) or "no GPU seen"
            w(f"kvtui: scenario {self.scenario.name} — engine {env['engine']}{sim} — GPU {gpus}\n")
            w(f"kvtui: SLO {self.scenario.slo.describe()}\n")
        elif k == "mode_starting":
            m = ev.data["mode"]["settings"]
            w(f"\n== mode {ev.mode} ({ev.data['index'] + 1}/{ev.data['of']}): dtype={m['dtype']} kv_cache_dtype={m['kv_cache_dtype']}"
              f"{' quantization=' + m['quantization'] if m['quantization'] else ''} — starting the engine…\n")
        elif k == "log" and self.verbose:
            w(f"  | {ev.data}\n")
        elif k == "engine_ready":
            f, info = ev.data["facts"], ev.data["info"]
            sim = " SIMULATED" if info.get("simulated") else ""
            w(f"[{ev.mode}] ready in {_fmt(f.get('startup_s'), ' s', 1)} ({info.get('engine')}{sim} {info.get('version') or ''}): "
              f"weights {_fmt(f.get('weights_gib'), ' GiB', 2)}, KV {_fmt(f.get('kv_cache_gib'), ' GiB', 2)} = "
              f"{_fmt(f.get('kv_cache_tokens'))} tokens\n")
            if info.get("time_scale", 1.0) != 1.0:
                w(f"[{ev.mode}] simulator in slow motion ×{info['time_scale']:g}: figures scaled back to modelled time\n")
        elif k == "step_finished":
            w(step_line(ev.mode, ev.data, self.scenario.slo.targets()) + "\n")
        elif k == "mode_finished":
            s = ev.data.get("search", {})
            pred = ev.data.get("predicted_kv_concurrency")
            what = "max concurrency" if self.scenario.ramp.load == "concurrency" else "max request rate (req/s)"
            w(f"[{ev.mode}] {what} at SLO: {s.get('describe', '—')}"
              f"{f'; KV-bound prediction {pred:g}' if pred else ''}; {s.get('steps', 0)} steps in {_fmt(s.get('wall_s'), ' s')}\n")
            from kvtui.report.compare import mode_summary

            r = mode_summary(ev.data, self.scenario)
            self._quality(ev.mode, ev.data)
            if r["best"] is not None and r["peak_load"] not in (None, r["best"]):
                pre = r["preemptions_at_knee"]
                w(f"[{ev.mode}] fastest within the SLO: {r['peak_load']:g} at {_fmt(r['output_tok_s'])} tok/s "
                  f"(the knee {r['best']:g} made {_fmt(r['knee_output_tok_s'])}{f' with {pre:g} preemptions' if pre else ''})\n")
        elif k == "warning":
            w(f"kvtui: warning: {(ev.mode + ': ') if ev.mode else ''}{ev.data}\n")
        elif k == "error":
            w(f"kvtui: error: {ev.data}\n")
        self.out.flush()


    def _quality(self, mode: str, md: dict[str, Any]) -> None:
        """The mode's quality lines, against the first mode that ran the suite (the reference)."""
        if not md.get("quality"):
            return
        from kvtui.report.compare import compare_modes
        from kvtui.report.text import quality_lines
        from kvtui.terminal import printable

        self.done.append(md)
        comp = compare_modes({"modes": list(self.done), "scenario": self.scenario.to_dict()}, self.scenario)
        row = next((r for r in comp["rows"] if r["mode"] == mode), None)
        for line in quality_lines(mode, (row or {}).get("quality")):
            self.out.write(printable(line) + "\n")


def print_summary(doc: dict[str, Any], out: TextIO = sys.stdout) -> None:
    from kvtui.report.text import comparison_table

    from kvtui.terminal import printable

    out.write("\n" + printable(comparison_table(doc)) + "\n")


def env_changes(scenario) -> list[str]:
    """The server environment the scenario changes, shown before anything starts (secret values hidden)."""
    from kvtui.secrets import REDACTED, is_secret_env
    from kvtui.terminal import printable

    out = []
    for who, env in [("every mode", scenario.server.env)] + [(f"mode {m.name}", m.env) for m in scenario.modes]:
        if env:
            shown = ", ".join(f"{k}={REDACTED if is_secret_env(k, scenario.server.secret_env) else v!r}" for k, v in env.items())
            out.append(printable(f"server environment ({who}): {shown}"))
    return out


def _ask(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    try:
        return sys.stdin.readline().strip().lower() in ("y", "yes")
    except (OSError, ValueError):
        return False


def check_leftovers(args: argparse.Namespace) -> None:
    """What earlier, killed runs left running: named, and stopped with --kill-stale (or on a yes)."""
    from kvtui.engines.leftovers import check_at_start

    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    check_at_start(getattr(args, "kill_stale", False), sys.stderr, _ask if interactive else None)


def run(args: argparse.Namespace) -> int:
    from kvtui.scenario import load_scenario
    from kvtui.scenario.defaults import demo_scenario_path

    path = args.scenario or str(demo_scenario_path())
    from kvtui.commands import scenario_args

    overrides = scenario_args.overrides(args)  # defaults < TOML < --set < --engine
    scenario = load_scenario(path, overrides, allow_env=getattr(args, "allow_env", False))
    scenario_args.check_fast(scenario, args.fast)
    resume = scenario_args.resumes(args)
    check_leftovers(args)
    if not args.headless:
        from kvtui.commands.tui import launch_tui

        return launch_tui(scenario, out=args.out, modes=args.modes, resume=resume, theme=args.theme, autostart=True, fast=args.fast)
    for w in scenario.warnings:
        print(f"kvtui: warning: {w}", file=sys.stderr)
    for line in env_changes(scenario):
        print(f"kvtui: {line}", file=sys.stderr)
    from kvtui.explore.run import Run

    out = Path(args.out) if args.out else default_out(scenario.name)
    printer = HeadlessPrinter(scenario, verbose=args.verbose)
    run_ = Run(scenario, out, modes=args.modes, listener=printer, resume=resume, fast=args.fast)
    from kvtui.preflight import gate, modes_to_start

    def show(c) -> None:
        print(f"kvtui: {c.line()}", file=sys.stderr if c.status == "fail" else sys.stdout, flush=True)

    pf = gate(scenario, modes_to_start(run_.modes, resume), fast=args.fast, emit=show)
    if not pf.ok:  # before the snapshot exists: nothing half-written
        print(f"kvtui: {pf.summary()}", file=sys.stderr)
        return 1
    interrupted = {"n": 0}

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        interrupted["n"] += 1
        if interrupted["n"] > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run_.stop(f"stopped by {name}")
        print(f"\nkvtui: {name}: stopping the load and the server, keeping what was measured…", file=sys.stderr)

    handled = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        # Started under nohup (or with SIGHUP ignored): the user wants the run to outlive the
        # terminal, so a dropped SSH session must not stop it.
        print("kvtui: SIGHUP is ignored (nohup): the run goes on if the terminal goes away", file=sys.stderr)
    else:
        handled.append(signal.SIGHUP)
    old = {s: signal.signal(s, on_signal) for s in handled}
    try:
        doc = run_.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    print_summary(doc)
    print(f"\nkvtui: snapshot {out} (records: {out.with_name(out.stem + '.records.jsonl')})")
    if interrupted["n"]:
        return 130
    if doc["run"].get("stop_reason"):
        return 1  # stopped by a failure (e.g. the records file became unwritable), not by the user
    failed = [m for m in doc["modes"] if m.get("error")]
    from kvtui.report.outcome import no_mode_started

    if no_mode_started(doc):
        print("kvtui: the run FAILED: no mode started (each mode's error is above)", file=sys.stderr)
    return 1 if failed else 0
