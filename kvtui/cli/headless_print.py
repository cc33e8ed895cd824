"""What `kvtui run --headless` prints: one line per step, the mode's result, the comparison table.

Its own module so that both the sequential run (cli/run.py) and the parallel lanes
(cli/parallel.py) print the same way without importing each other."""

from __future__ import annotations

import math
import sys
from typing import Any, TextIO

from kvtui.explore.events import (
    EngineReady,
    Event,
    Log,
    ModeFinished,
    ModeStarting,
    RunError,
    RunNote,
    RunStarted,
    RunWarning,
    StepFinished,
    check_kind,
)
from kvtui.report.text import step_how


def _fmt(x: Any, unit: str = "", digits: int = 0) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:,.{digits}f}{unit}"


def step_line(mode: str, step: dict[str, Any], slo_targets: list[tuple[str, str, float]],
              prefix: bool = False, width: int | None = None) -> str:
    """The step in one line. `prefix`: the workload shares prompt blocks (a trace, a shared prefix, a
    dataset), so the prefix-cache hit rate is shown even at 0 % (else only when the cache hit at all).
    With `width` (a terminal's) and a line longer than it: the short form (compact_step_line), so an
    80-column terminal shows each step on one line."""
    line = _full_step_line(mode, step, slo_targets, prefix)
    if width is None or len(line) <= width:
        return line
    return compact_step_line(mode, step, slo_targets, width)


def _short_verdict(step: dict[str, Any]) -> str:
    """PASS, or FAIL with the SLO figure that failed and its limit: "FAIL TPOT95 (decode)"."""
    from kvtui.core.evaluate import LIMIT_WORDS
    from kvtui.io.snapshot.schema import Step

    s = Step.of(step)
    if step.get("cut"):
        return "CUT SHORT"
    lim = LIMIT_WORDS.get(s.limited_by or "", s.limited_by or "")
    if s.passed is True:
        return "PASS"
    if s.passed is False:
        failed = [c for c in s.checks or () if c.ok is False]
        what = ""
        if failed:
            parts = str(failed[0].target or "").split("_")
            what = f" {parts[0].upper()}{parts[1][1:]}" if len(parts) >= 3 and parts[-1] == "ms" else \
                f" {parts[0]}" if parts[0] else ""
        return "FAIL" + what + (f" ({lim})" if lim else "")
    return "UNDECIDED"


def load_head(step: dict[str, Any]) -> str:
    """A step's load as its line starts: "c=8", "rate=2.5" (req/s), or "trace×1.5" (a trace replay's
    speed-up factor of its recorded arrival times)."""
    kind = step.get("load_kind", "concurrency")
    if kind == "trace":
        return f"trace×{step['load']:g}"
    return f"{'c' if kind == 'concurrency' else 'rate'}={step['load']:g}"


def compact_step_line(mode: str, step: dict[str, Any], slo_targets: list[tuple[str, str, float]],
                      width: int) -> str:
    """The step line's short form for a narrow terminal: the load, each SLO figure, the verdict and
    its tags always; n, tok/s, KV and preemptions while they fit (dropped in that order from the end)."""
    head = f"[{mode}] {load_head(step)}"
    shown = {("ttft", "p95"), ("tpot", "p95")} | {(m, p) for m, p, _ in slo_targets}
    figs = [f"{m.upper()}{p[1:]} {_fmt(step[f'{m}_ms'].get(p), 'ms')}"
            for m, p in sorted(shown, key=lambda x: ("ttft", "tpot", "itl", "e2e").index(x[0]))]
    tail = [_short_verdict(step)]
    if step.get("errors"):
        tail.insert(0, f"err {step['errors']}")
    if step.get("flags"):
        tail.append("FLAGS " + ",".join(sorted(step["flags"])))
    how = step_how(step)
    tail += ["[early]" if h.startswith("early") else f"[{h.split()[0]}]" for h in how]
    if step.get("why") == "confirm":
        tail.append("[confirm]")
    optional = [f"n={step['requests']}", f"{_fmt(step['output_tok_s'])} tok/s"]
    if step.get("kv_cache_usage_max") is not None:
        optional.append(f"KV {step['kv_cache_usage_max']:.0%}")
    if step.get("preemptions"):
        optional.append(f"pre {step['preemptions']:g}")
    verdict = tail.index(_short_verdict(step))
    bare = list(tail)
    bare[verdict] = bare[verdict].split(" (")[0]  # the limit's words last: the answer's "why" says them too
    for sep, t in (("  ", tail), (" ", tail), (" ", bare)):
        opt = list(optional)
        while True:
            line = sep.join([head, *opt[:1], *figs, *opt[1:], *t])
            if len(line) <= width or not opt:
                break
            opt.pop()
        if len(line) <= width:
            return line
    return line


def _full_step_line(mode: str, step: dict[str, Any], slo_targets: list[tuple[str, str, float]],
                    prefix: bool = False) -> str:
    from kvtui.report.text import verdict_words

    verdict = verdict_words(step)
    if step.get("cut"):
        verdict = f"CUT SHORT ({step.get('aborted')}): no verdict"
    parts = [f"[{mode}] {load_head(step)}", f"n={step['requests']}", f"{_fmt(step['output_tok_s'])} tok/s"]
    shown = {("ttft", "p95"), ("tpot", "p95")} | {(m, p) for m, p, _ in slo_targets}
    for m, p in sorted(shown, key=lambda x: ("ttft", "tpot", "itl", "e2e").index(x[0])):
        v = step[f"{m}_ms"].get(p)
        parts.append(f"{m.upper()} {p} {_fmt(v, ' ms', 1)}")
    if step["errors"]:
        parts.append(f"errors {step['errors']}")
    if step.get("kv_cache_usage_max") is not None:
        parts.append(f"KV {step['kv_cache_usage_max']:.0%}")
    elif step.get("metrics_missing"):  # a figure that stopped arriving is named, not dropped
        parts.append(f"KV — (no /metrics: {step['metrics_missing']})")
    if step.get("preemptions"):
        parts.append(f"preempt {step['preemptions']:g}")
    hit = step.get("prefix_cache_hit_rate")
    if hit is not None and (prefix or hit > 0):  # vLLM's prefix_cache_hits / queries in the window
        parts.append(f"prefix hit {hit:.0%}")
    from kvtui.core.evaluate import in_lock_step

    if in_lock_step(step):
        parts.append(f"lock-step {step['send_burst']:.0%}")

    auto = step.get("autoscale") or {}
    if auto.get("added") or auto.get("held"):  # the load generator resized itself (or could not)
        parts.append(f"workers {auto.get('workers')}" + (" (no core to spare)" if auto.get("held") else ""))
    if step.get("flags"):
        # Named doubts (untrusted server numbers, the client's own failures): never hidden.
        parts.append("FLAGS " + ", ".join(f"{k}={v}" for k, v in sorted(step["flags"].items())))
    # "[early]": the verdict was decided before the step's full window; "[watched …]": the KV wall's
    # noisy side (docs/PROTOCOL.md; the words every view shows: kvtui.report.text.step_how)
    how = step_how(step)
    early = [h for h in how if h.startswith("early")]
    parts.append(verdict + (" [early]" if early else ""))
    parts += [f"[{h}]" for h in how if not h.startswith("early")]
    if step.get("why") == "confirm":
        parts.append("[confirm]")
    if step.get("resumed"):
        parts.append("[kept from the resumed run]")
    if step.get("replicas_lost"):
        parts.append("REPLICA LOST: " + "; ".join(step.get("notes") or []))
    bad = step.get("metrics_out_of_range")
    if isinstance(bad, list) and bad:  # dropped at parse, never a verdict or a label: said where it is read
        parts.append("metrics out of range: " + ", ".join(str(x) for x in bad))
    return "  ".join(parts)


class HeadlessPrinter:
    def __init__(self, scenario, out: TextIO | None = None, verbose: bool = False):
        self.scenario = scenario
        # sys.stdout as it is when the printer is made, not when this module was imported (a default
        # bound at import kept a stream a test harness had since closed)
        self.out = out if out is not None else sys.stdout
        self.verbose = verbose
        self.label = ""
        self.done: list[dict[str, Any]] = []  # finished modes, for the quality lines' reference

    def __call__(self, ev: Event) -> None:
        # Dispatch on the event's class (kvtui.explore.events): each branch reads typed fields, a
        # mode's event always names its mode. A kind no one declared is refused, never passed over.
        check_kind(ev.kind)
        if not isinstance(ev, Event):
            raise TypeError(f"the headless printer takes kvtui.explore.events types, not {type(ev).__name__}")
        w = self._w
        match ev:
            case RunStarted(doc=doc):
                env = doc["environment"]
                sim = " SIMULATED" if env.get("simulated") else ""
                gpus = ", ".join(env.get("gpu_names") or []) or "no GPU seen"
                w(f"kvtui: scenario {self.scenario.name} — engine {env['engine']}{sim} — GPU {gpus}\n")
                w(f"kvtui: SLO {self.scenario.slo.describe()}\n")
                if doc.get("trace"):  # what the run replays, before any server starts
                    from kvtui.io.scenario.trace import describe

                    for line in describe(doc["trace"]):
                        w(f"kvtui: {line}\n")
            case ModeStarting(mode=name, index=index, of=of, mode_doc=md):
                m = md["settings"]
                w(f"\n== mode {name} ({index + 1}/{of}): dtype={m['dtype']} "
                  f"kv_cache_dtype={m['kv_cache_dtype']}"
                  f"{' quantization=' + m['quantization'] if m['quantization'] else ''} — starting the engine…\n")
            case Log(line=line) if self.verbose:
                w(f"  | {line}\n")
            case EngineReady(mode=name, facts=f, info=info):
                self._engine_ready(name, f, info)
            case StepFinished(mode=name, step=step):
                wl = self.scenario.workload
                shares = bool(wl.trace or wl.shared_prefix or wl.dataset)
                w(step_line(name, step, self.scenario.slo.targets(), prefix=shares, width=self._cols()) + "\n")
            case ModeFinished(mode=name, mode_doc=md):
                self._mode_finished(name, md)
            case RunNote(mode=name, text=text):
                w(f"{'[' + name + '] ' if name else 'kvtui: '}{text}\n")
            case RunWarning(mode=name, text=text):
                w(f"kvtui: warning: {(name + ': ') if name else ''}{text}\n")
            case RunError(text=text):
                w(f"kvtui: error: {text}\n")
        self.out.flush()

    def _w(self, text: str) -> None:
        from kvtui.terminal import printable

        # names, server logs and errors come from files and servers: no escapes
        self.out.write(self._fit(printable(text)))

    def _engine_ready(self, name: str, f: dict[str, Any], info: dict[str, Any]) -> None:
        w = self._w
        sim = " SIMULATED" if info.get("simulated") else ""
        ready = ("modelled offline, no server" if info.get("fast") or f.get("startup_s") is None
                 else f"ready in {_fmt(f.get('startup_s'), ' s', 1)}")
        w(f"[{name}] {ready} — "
          f"{info.get('engine')}{sim} {info.get('version') or ''}: "
          f"weights {_fmt(f.get('weights_gib'), ' GiB', 2)}, KV {_fmt(f.get('kv_cache_gib'), ' GiB', 2)} = "
          f"{_fmt(f.get('kv_cache_tokens'))} tokens\n")
        from kvtui.report.text import speed_words
        from kvtui.runtime.engines.vllm.compile_cache import start_line

        if start_line(f):
            w(f"[{name}] start: {start_line(f)}\n")
        if speed_words(info.get("time_scale")):
            w(f"[{name}] simulator in {speed_words(info['time_scale'])}: "
              "figures scaled back to modelled time\n")

    def _mode_finished(self, name: str, md: dict[str, Any]) -> None:
        w = self._w
        s = md.get("search", {})
        pred = md.get("predicted_kv_concurrency")
        what = {"concurrency": "max concurrency", "trace": "max speed-up of your traffic (× its recorded rate)"}.get(
            self.scenario.ramp.load, "max request rate (req/s)")
        w(f"[{name}] {what} at SLO: {s.get('describe', '—')}"
          f"{f'; KV-bound prediction {pred:g}' if pred else ''}; "
          f"{s.get('steps', 0)} steps in {_fmt(s.get('wall_s'), ' s')}\n")
        from kvtui.report.compare import mode_summary

        r = mode_summary(md, self.scenario)
        self._quality(name, md)
        if r["best"] is not None and r["peak_load"] not in (None, r["best"]):
            pre = r["preemptions_at_knee"]
            w(f"[{name}] fastest within the SLO: {r['peak_load']:g} at {_fmt(r['output_tok_s'])} tok/s "
              f"(the knee {r['best']:g} made {_fmt(r['knee_output_tok_s'])}"
              f"{f' with {pre:g} preemptions' if pre else ''})\n")

    def _cols(self) -> int | None:
        """The terminal's width, or None to a pipe or a file (a script reads each line whole)."""
        isatty = getattr(self.out, "isatty", None)
        if not (callable(isatty) and isatty()):
            return None
        import os

        try:
            cols = int(os.environ.get("COLUMNS") or os.get_terminal_size(self.out.fileno()).columns)
        except (OSError, ValueError, AttributeError):
            cols = 120
        return max(40, cols)

    def _fit(self, text: str) -> str:
        """On a terminal (a person reading), each line wrapped at a word to the terminal's width, the
        rest indented under it: an 80-column terminal cut a step line mid-word. To a pipe or a file
        (a script reading), each line whole, as it always was."""
        cols = self._cols()
        if cols is None:
            return text
        import textwrap

        out = []
        for line in text.split("\n"):
            out.append("\n".join(textwrap.wrap(line, cols, subsequent_indent="    ", break_long_words=False,
                                                break_on_hyphens=False)) if len(line) > cols else line)
        return "\n".join(out)

    def _quality(self, mode: str, md: dict[str, Any]) -> None:
        """The mode's quality lines, against the first mode that ran the suite (the reference)."""
        if not md.get("quality"):
            return
        from kvtui.io.snapshot.schema import ComparisonRow
        from kvtui.report.compare import compare_modes
        from kvtui.report.text import quality_lines
        from kvtui.terminal import printable

        self.done.append(md)
        comp = compare_modes({"modes": list(self.done), "scenario": self.scenario.to_dict()}, self.scenario)
        row = next((r for r in comp["rows"] if r["mode"] == mode), None)
        for line in quality_lines(mode, ComparisonRow.of(row).quality if row else None, comp.get("quality_reference")):
            self.out.write(printable(line) + "\n")


def print_summary(doc: dict[str, Any], out: TextIO | None = None, wide: bool = False,
                  width: int | None = None) -> None:
    """The run's ending: the answer's lines (the winner per question, × against the baseline, why),
    then the comparison as a table that fits the terminal (kvtui.report.fit_table)."""
    out = out if out is not None else sys.stdout
    import shutil
    import textwrap

    from kvtui.report.answer import build_answer, headline
    from kvtui.report.fit_table import fitted_table
    from kvtui.report.text import comparison, comparison_headers, comparison_rows, labels
    from kvtui.terminal import output_width, printable

    fit_to = width or output_width(out)  # None: a pipe or a file, every table whole (every column)
    cols = fit_to or shutil.get_terminal_size((120, 40)).columns  # the prose's wrap
    table_cols = fit_to or 10**6  # to a pipe: no column left out for width (the empty ones still go)
    ans = build_answer(doc)

    def say(text: str, indent: str = "") -> None:
        for line in textwrap.wrap(printable(text), max(40, cols), initial_indent=indent,
                                  subsequent_indent=indent + "  ", break_long_words=False, break_on_hyphens=False):
            out.write(line + "\n")

    out.write("\n")
    say(f"ANSWER: {headline(ans)}")
    say(f"({labels(doc)})")
    for q in ans["questions"]:
        who = "every mode" if q["tie"] else ", ".join(q["winners"]) or "—"
        say(f"{q['question']}: {who} ({q['text']})", "  ")
    if ans["lines"]:
        say("why:")
        for line in ans["lines"]:
            say(f"- {line}", "  ")
    if ans["caveats"]:
        say("caveats:")
        for c in ans["caveats"]:
            say(f"- {c}", "  ")
    comp = comparison(doc)
    out.write("\n")
    say(f"Modes vs baseline {comp.get('baseline') or '—'}")
    body = fitted_table(comparison_headers(doc), comparison_rows(doc), table_cols, wide)
    out.write(printable(body) + "\n")
    if comp.get("note"):
        say(f"note: {comp['note']}")


def answer_json(doc: dict[str, Any], snapshot: Any = None) -> dict[str, Any]:
    """The answer as data, for scripts (`--json`): what the answer screen shows, with the run it
    answers (engine, GPU, versions, SIMULATED, weights, whether it finished, the snapshot)."""
    from kvtui.report.answer import build_answer, headline
    from kvtui.report.text import labels

    ans = build_answer(doc)
    env = doc.get("environment") or {}
    modes = [m for m in doc.get("modes") or [] if isinstance(m, dict)]
    infos = [m.get("engine_info") or {} for m in modes]
    run = doc.get("run") or {}
    gpus = [str(g).removesuffix(" (SIMULATED)") for g in env.get("gpu_names") or []]
    real = sorted({i["weights"][len("real: "):] for i in infos
                   if isinstance(i.get("weights"), str) and i["weights"].startswith("real: ")})
    about = {
        "scenario": (doc.get("scenario") or {}).get("name"),
        "engine": env.get("engine"),
        "gpu": gpus[0] if gpus else None,
        "gpus": gpus,
        "versions": sorted({str(i.get("version")) for i in infos if i.get("version")}),
        "simulated": bool(env.get("simulated") or any(m.get("simulated") for m in modes)),
        "weights": "dummy" if any(i.get("dummy_weights") for i in infos) else ("real: " + "; ".join(real) if real
                                                                               else None),
        "labels": labels(doc),
        "outcome": run.get("outcome") or ("finished" if run.get("finished") else None),
        "snapshot": str(snapshot) if snapshot is not None else None,
    }
    return {"headline": headline(ans), "run": about, **ans}
