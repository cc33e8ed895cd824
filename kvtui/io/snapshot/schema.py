"""What a snapshot is: the run, its modes, their steps, predictions, quality and replicas, typed.

One place says what each key of a snapshot holds (docs/SNAPSHOT.md is generated from the
`field` docs below: `python -m kvtui.io.snapshot.docs`). The stored form stays the JSON the run
writes (kvtui.io.snapshot.file); `Run.from_dict(doc).to_dict() == doc` for every snapshot, of
this version or another (kvtui.io.snapshot.document says how unknown keys and odd values are
kept), and every published one round-trips byte-identically (tests/snapshot).

Units: times in seconds (`*_s`), latencies in milliseconds (`*_ms`), memory in GiB (`*_gib`),
shares as 0–1 fractions, loads as concurrent requests (closed loop) or requests/s (open loop,
`load_kind` "rate"). An infinite latency (a failed request counts as +∞) is "inf" in the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kvtui.io.snapshot.document import ANY, BOOL, INT, LIST, NUMBER, OBJECT, TEXT, Document, by_name, field, many, one

SCHEMA = "kvtui.snapshot/1"  # the version a snapshot says it is ("schema"); bump it for a change readers must know
SUPPORTED = ("kvtui.snapshot/1",)  # the versions this kvtui reads without a warning


@dataclass(frozen=True)
class Distribution(Document):
    """One latency's distribution over a step's counted requests (ms; a failed request is +∞)."""

    n: int | None = field("samples the figures are computed from", INT)
    failures: int | None = field("of them, requests that failed (counted as +∞)", INT)
    mean: float | None = field("mean (ms)", NUMBER)
    p50: float | None = field("median (ms)", NUMBER)
    p90: float | None = field("90th percentile (ms)", NUMBER)
    p95: float | None = field("95th percentile (ms; what the default SLO checks)", NUMBER)
    p99: float | None = field("99th percentile (ms); null with too few samples to say", NUMBER)
    std: float | None = field("standard deviation (ms; an imported `vllm bench` result's own)", NUMBER)


@dataclass(frozen=True)
class ReplicaStep(Document):
    """One replica's share of a step, where a mode ran several servers behind one router (docs/REPLICAS.md)."""

    name: str | None = field("the replica (r0, r1…)", TEXT)
    requests: int | None = field("requests it served in the window", INT)
    errors: int | None = field("of them, failed", INT)
    output_tok_s: float | None = field("its output tokens/s in the window", NUMBER)
    input_tok_s: float | None = field("its input (prompt) tokens/s in the window", NUMBER)
    ttft_ms: Distribution | None = field("its time to first token", one(Distribution))
    tpot_ms: Distribution | None = field("its time per output token", one(Distribution))
    kv_cache_usage_max: float | None = field("its KV cache's fullest share", NUMBER)
    running_max: float | None = field("most requests it ran at once", NUMBER)
    waiting_max: float | None = field("most requests queued on it", NUMBER)
    preemptions: float | None = field("preemptions it reported in the window", NUMBER)
    kv_usage_max: float | None = field("a data-parallel engine's (a rank's) fullest KV share, from /metrics", NUMBER)


@dataclass(frozen=True)
class ReplicaLost(Document):
    """A replica that died during a step (kvtui.explore.replica_step)."""

    name: str | None = field("the replica (r0, r1…)", TEXT)
    why: str | None = field("what was seen: its process exited, its endpoint stopped answering…", TEXT)
    failed_requests: int | None = field("its requests that failed with it", INT)


@dataclass(frozen=True)
class SloCheck(Document):
    """One SLO target judged on a step."""

    target: str | None = field("the target: ttft_p95_ms, tpot_p95_ms, error_rate, goodput…", TEXT)
    limit: float | None = field("its limit", NUMBER)
    value: float | None = field("the step's figure; null where too few samples give none", NUMBER)
    n: int | None = field("samples the figure is computed from", INT)
    ok: bool | None = field("met (true), missed (false), or undecided (null)", BOOL)
    why: str | None = field("why it is undecided (too few samples…)", TEXT)


@dataclass(frozen=True)
class Deciding(Document):
    """The SLO figure that decided a predicted verdict."""

    target: str | None = field("the SLO target (tpot_p95_ms…)", TEXT)
    value: float | None = field("the predicted figure", NUMBER)
    limit: float | None = field("its limit", NUMBER)


@dataclass(frozen=True)
class StepPrediction(Document):
    """The simulator's prediction for a step's load, made before it ran (SIMULATED)."""

    passed: bool | None = field("the predicted verdict", BOOL)
    output_tok_s: float | None = field("predicted output tokens/s", NUMBER)
    ttft_p95_ms: float | None = field("predicted TTFT p95 (ms)", NUMBER)
    tpot_p95_ms: float | None = field("predicted TPOT p95 (ms)", NUMBER)
    limited_by: str | None = field("what the prediction says limits this load", TEXT)
    knee: float | None = field("the predicted knee when this step ran", NUMBER)
    interpolated: bool | None = field("read between two predicted loads", BOOL)
    deciding: Deciding | None = field("the SLO figure that decided the verdict", one(Deciding))


@dataclass(frozen=True)
class Step(Document):
    """One measured load: its figures over the measurement window and its verdict against the SLO."""

    concurrency: float | None = field("the load (same as `load`; the name older readers use)", NUMBER)
    load: float | None = field("the load: concurrent requests, requests/s for an open-loop (rate) step, or the "
                              "speed-up factor of a trace replay (trace: 1 = the trace's recorded times)", NUMBER)
    load_kind: str | None = field("\"concurrency\" (closed loop), \"rate\" (open loop) or \"trace\" (open loop, "
                                  "the trace's own arrival times × the factor)", TEXT)
    rate: float | None = field("the load of an open-loop step imported from `vllm bench` (requests/s; as `load`)",
                               NUMBER)
    requests: int | None = field("requests counted in the window", INT)
    errors: int | None = field("of them, failed", INT)
    error_rate: float | None = field("errors / requests", NUMBER)
    errors_by_class: Mapping[str, Any] | None = field("failed requests by class (timeout, http_5xx…): count", OBJECT)
    samples: Mapping[str, Any] | None = field("samples per latency (ttft, tpot, itl, e2e)", OBJECT)
    output_tok_s: float | None = field("output tokens/s emitted inside the window (every request's)", NUMBER)
    input_tok_s: float | None = field("input (prompt) tokens/s of requests started inside the window", NUMBER)
    total_tok_s: float | None = field("output + input tokens/s", NUMBER)
    request_s: float | None = field("requests finished per second in the window", NUMBER)
    ttft_ms: Distribution | None = field("time to first token", one(Distribution))
    tpot_ms: Distribution | None = field("time per output token after the first, per request", one(Distribution))
    itl_ms: Distribution | None = field("inter-token gaps, pooled over every request (\"stalls\")", one(Distribution))
    e2e_ms: Distribution | None = field("end-to-end request latency", one(Distribution))
    goodput: float | None = field("share of counted requests that met every per-request SLO target", NUMBER)
    goodput_req_s: float | None = field("requests/s that met them", NUMBER)
    passed: bool | None = field("the SLO verdict: true, false, or null (undecided: too few samples)", BOOL)
    checks: tuple[SloCheck, ...] | None = field("each SLO target judged", many(SloCheck))
    prefix_cache_hit_rate: float | None = field("the server's prefix-cache hit rate over the step (its counters read "
                                                "before it and after it)", NUMBER)
    kv_cache_usage_max: float | None = field("the KV cache's fullest share in the window", NUMBER)
    kv_cache_usage_mean: float | None = field("its mean share", NUMBER)
    preemptions: float | None = field("preemptions the server reported over the step (its counters read before it "
                                      "and after it)", NUMBER)
    running_max: float | None = field("most requests the server ran at once", NUMBER)
    waiting_max: float | None = field("most requests queued on the server", NUMBER)
    server_means_ms: Mapping[str, Any] | None = field("the server's own means from /metrics (ttft, itl, tpot, e2e, "
                                                   "queue)", OBJECT)
    server_tokens: Mapping[str, Any] | None = field("tokens the server counted in the window (prompt, generation)",
                                                 OBJECT)
    gpu_mem_used_gib_max: float | None = field("most GPU memory used in the window (NVML; GiB)", NUMBER)
    window_s: float | None = field("the measurement window's length (s)", NUMBER)
    time_scale: float | None = field("the simulator's time scale (1.0 for a real server)", NUMBER)
    client: Mapping[str, Any] | None = field("the load generator's own health (cpu, loop lag, dispatch delay, "
                                          "workers): whether it kept up", OBJECT)
    client_limited: bool | None = field("the load generator, not the server, limited the step", BOOL)
    error_burst: bool | None = field("errors came in a burst (the server failing, not the load)", BOOL)
    aborted: str | None = field("why the step was cut short (a stop, a skip, the engine's death); null when it "
                                "ran to its end", TEXT)
    limited_by: str | None = field("what limited it: kv_wall, decode, prefill, errors, client…", TEXT)
    client_tokens: Mapping[str, Any] | None = field("tokens the client sent and received over the whole step",
                                                 OBJECT)
    index: int | None = field("its place in the mode's steps, from 0", INT)
    why: str | None = field("why it ran: search, confirm, manual or hold", TEXT)
    started_at: float | None = field("when it started (epoch s)", NUMBER)
    duration_s: float | None = field("how long it ran, warm-up and tail included (s)", NUMBER)
    t_window_start: float | None = field("the window's start (the load generator's monotonic clock, s)", NUMBER)
    t_window_end: float | None = field("the window's end (same clock)", NUMBER)
    t_rel_start: float | None = field("the step's start, seconds from the run's start (the series' `t`)", NUMBER)
    t_rel_end: float | None = field("its end, same clock", NUMBER)
    send_burst: float | None = field("how many requests were sent at once (lock-step waves when large)", NUMBER)
    autoscale: Mapping[str, Any] | None = field("load-generator workers that ran and why any were added", OBJECT)
    predicted: StepPrediction | None = field("the simulator's prediction for this load, before it ran",
                                             one(StepPrediction))
    protocol: str | None = field("how the step was measured: \"continuous\" (docs/PROTOCOL.md), or \"classic\" "
                                 "(drained, full tail; retired in issue 46: a closed-loop step without the field was "
                                 "measured so too)", TEXT)
    drain: Mapping[str, Any] | None = field("whether the server was drained before the step, and why: {before, why}",
                                            OBJECT)
    continued_from: Mapping[str, Any] | None = field("the step whose in-flight requests this one started from (no "
                                                     "drain): {step, load, in_flight}", OBJECT)
    phases_s: Mapping[str, Any] | None = field("where the step's time went: warm-up, window, tail, drain (s)", OBJECT)
    ramp: Mapping[str, Any] | None = field("how the step's new requests started (continuous protocol): {stagger_s "
                                           "(their first sends spread over), settle (\"time\": the window opened "
                                           "warm-up after the last; \"turnover\": also once every slot finished a "
                                           "request), e2e_est_s (the request duration the spread used), why; where the "
                                           "load is on the KV wall's noisy side, window_s (the lengthened window), "
                                           "window_why and watched_s (how long it watched)}", OBJECT)
    t_end: float | None = field("when the step's requests ended (the load generator's clock, s)", NUMBER)
    stopped_early: bool | None = field("the step ended before its full window with its verdict decided (early_stop "
                                       "says by what)", BOOL)
    early_stop: Mapping[str, Any] | None = field("why the step stopped early: {by: \"sequential\" (the sequential "
                                                 "test decided it) or \"preemption\" (a preemption where the SLO "
                                                 "allows none: FAIL whatever the rest of the window shows), why}",
                                                 OBJECT)
    settled: str | None = field("ramp.confirm_when = \"doubt\": why this knee step's verdict needs no repeat (the "
                                "sequential test decided it, a PASS's too few samples pooled with those of the loads "
                                "above it where need be, or the KV cache's arithmetic: kvtui/core/settled.py; a "
                                "pass may be settled by a later step); null: in doubt, the confirmation repeats it",
                                TEXT)
    sequential: Mapping[str, Any] | None = field("the sequential test: confidence, looks, samples, the bounds seen per "
                                                 "SLO figure", OBJECT)
    stats_from: str | None = field("\"window\": figures from the window's own requests, cut ones by their gaps so "
                                   "far (docs/PROTOCOL.md); absent: from requests run to completion", TEXT)
    window_cut: Mapping[str, Any] | None = field("requests the window's end cut, and TTFTs it censored", OBJECT)
    births: Mapping[str, Any] | None = field("the \"births\" tail rule (docs/PROTOCOL.md): TPOT and E2E count the "
                                             "window requests sent by `cutoff` (the load generator's clock, s; null: "
                                             "every one), each run to its end; `requests`: how many", OBJECT)
    live: Mapping[str, Any] | None = field("a live simulated step: what the client measured (the model's figures plus "
                                        "the client's delay); the step's own figures are the scheduler model's", OBJECT)
    pass_probability: Mapping[str, Any] | None = field("{p, n_boot, requests}: the share of bootstrap resamples of the "
                                                       "window's requests that pass the SLO "
                                                       "(kvtui.core.knee_interval)", OBJECT)
    resumed: Any = field("set on a step kept from the snapshot a run resumed", ANY)
    replicas: tuple[ReplicaStep, ...] | None = field("each replica's share (several servers behind one router)",
                                                     many(ReplicaStep))
    ranks: tuple[ReplicaStep, ...] | None = field("each data-parallel engine's gauges (one server with several "
                                                  "engines): name, kv_usage_max, running_max, waiting_max",
                                                  many(ReplicaStep))
    notes: list[Any] | None = field("what a reader must know about this step (requests lost…)", LIST)
    note: str | None = field("a remark on its load (more concurrency than the server's max_num_seqs…)", TEXT)
    replicas_lost: tuple[ReplicaLost, ...] | None = field("replicas that died during the step; its figures stay "
                                                          "those of every request", many(ReplicaLost))
    flags: Mapping[str, Any] | None = field("what went wrong in the step's requests, by name: count (timeouts, "
                                            "truncated streams…), and the client's stall or failure", OBJECT)
    cut: bool | None = field("the step was cut short: its in-flight requests were lost", BOOL)
    client_failure: str | None = field("why the load generator could not measure on (a dead worker, a crashed "
                                       "task): the step has no server verdict", TEXT)
    metrics_out_of_range: list[Any] | None = field("/metrics values outside their range in the window: dropped, "
                                                   "used for no verdict or limit (kvtui.runtime.telemetry.prom)", LIST)
    metrics_missing: str | None = field("why the step has no /metrics figures (KV, running): the scrapes failed "
                                        "or none landed in its window", TEXT)
    remeasured: bool | None = field("a replica died in this failed step: not the SLO's verdict; its load was "
                                    "measured again on the replicas left (the next step)", BOOL)
    repeat_of: Any = field("the step this one repeats", ANY)
    search_phase: Any = field("the search's phase when it ran", ANY)
    fast: bool | None = field("measured by the offline fast simulator (no HTTP): SIMULATED", BOOL)
    engine_limits: Mapping[str, Any] | None = field("the offline simulator's engine iterations by what bound each "
                                                 "(idle, compute, weights…)", OBJECT)
    source: Mapping[str, Any] | None = field("an imported step's origin: {tool, file, date, model_id…} "
                                             "(kvtui import)", OBJECT)

    def number(self, key: str) -> float | None:
        """A numeric field by its JSON key (None when missing, null, a bool or a string)."""
        s = self.fields().get(key)
        v = getattr(self, s.name) if s is not None else self.extras.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def latency(self, metric: str) -> Distribution | None:
        """A latency's distribution by its name: ttft, tpot, itl or e2e."""
        d = self.by_key(f"{metric}_ms")
        return d if isinstance(d, Distribution) else None

    @property
    def ran_to_its_end(self) -> bool:
        """Whether it measured its load: one cut short (`aborted`) lost its in-flight requests."""
        return not self.aborted and not self.extras.get("aborted")

    def sample_count(self, metric: str) -> int:
        v = (self.samples or {}).get(metric)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0


@dataclass(frozen=True)
class CurvePoint(Document):
    """One load of a predicted curve: the offline simulator's step at that load (SIMULATED;
    kvtui.explore.prediction.curve_point)."""

    load: float | None = field("the simulated load", NUMBER)
    passed: bool | None = field("its simulated verdict", BOOL)
    ttft_p95_ms: float | None = field("simulated TTFT p95 (ms)", NUMBER)
    tpot_p95_ms: float | None = field("simulated TPOT p95 (ms)", NUMBER)
    output_tok_s: float | None = field("simulated output tokens/s", NUMBER)
    limited_by: str | None = field("what limited the simulated step (empty: nothing)", TEXT)
    deciding: Deciding | None = field("the SLO figure that decided its verdict", one(Deciding))


@dataclass(frozen=True)
class PredictionError(Document):
    """The prediction against what was measured: errors are (predicted − measured) / measured."""

    knee_predicted: float | None = field("the predicted knee", NUMBER)
    knee_measured: float | None = field("the measured knee", NUMBER)
    knee_error: float | None = field("predicted − measured knee (in loads)", NUMBER)
    verdicts_agreed: int | None = field("judged steps whose verdict came out as predicted", INT)
    verdicts: int | None = field("judged steps", INT)
    ttft_p95_ms_error_mean: float | None = field("TTFT p95's mean relative error over the judged steps", NUMBER)
    ttft_p95_ms_error_max: float | None = field("its largest", NUMBER)
    tpot_p95_ms_error_mean: float | None = field("TPOT p95's mean relative error", NUMBER)
    tpot_p95_ms_error_max: float | None = field("its largest", NUMBER)
    output_tok_s_error_mean: float | None = field("output tok/s's mean relative error", NUMBER)
    output_tok_s_error_max: float | None = field("its largest", NUMBER)


@dataclass(frozen=True)
class Refit(Document):
    """The simulator's factors refitted on the mode's steps so far (kvtui.explore.refit)."""

    steps: int | None = field("measured steps it was fitted on", INT)
    after_step: int | None = field("the step after which it ran", INT)
    loads: list[Any] | None = field("their loads", LIST)
    calibration: str | None = field("the calibration it makes, in words", TEXT)
    multipliers: Mapping[str, Any] | None = field("each factor's multiplier against the prior calibration", OBJECT)
    factors: Mapping[str, Any] | None = field("the refitted factors, per precision", OBJECT)
    rms_log_error_before: float | None = field("the prior's RMS log error on those steps", NUMBER)
    rms_log_error_after: float | None = field("the refit's", NUMBER)
    evaluations: int | None = field("model evaluations the fit took", INT)
    wall_s: float | None = field("how long it took (s)", NUMBER)
    knee: float | None = field("the knee predicted again from the refit, where it was", NUMBER)
    curve: tuple[CurvePoint, ...] | None = field("the curve predicted again, where it was", many(CurvePoint))


@dataclass(frozen=True)
class Prediction(Document):
    """The simulator's prediction of a mode, made before its first step (SIMULATED, always)."""

    simulated: bool | None = field("always true: a prediction is the simulator's", BOOL)
    sim_version: str | None = field("the simulator that predicted", TEXT)
    calibration: str | None = field("the calibration file its factors came from", TEXT)
    gpu: str | None = field("the GPU it predicted for", TEXT)
    model: str | None = field("the model (its config.json)", TEXT)
    covered: bool | None = field("whether the model and GPU are ones the simulator covers", BOOL)
    knee: float | None = field("the predicted best load at the SLO", NUMBER)
    first_fail: float | None = field("the predicted first failing load", NUMBER)
    reached_max: bool | None = field("the prediction passed up to the ramp's max", BOOL)
    resolution: float | None = field("the load step of the predicted search", NUMBER)
    kv_bound_guess: float | None = field("concurrency the KV cache holds (KV tokens / tokens per request)", NUMBER)
    curve: tuple[CurvePoint, ...] | None = field("predicted figures per load, in load order", many(CurvePoint))
    factors: Mapping[str, Any] | None = field("the efficiency factors used, per precision", OBJECT)
    wall_s: float | None = field("how long the prediction took (s)", NUMBER)
    prior_calibration: str | None = field("the calibration before any refit on this run's steps", TEXT)
    refits: tuple[Refit, ...] | None = field("factors refitted after each measured step, and the multipliers",
                                             many(Refit))
    error: PredictionError | None = field("the prediction against what was measured", one(PredictionError))
    why: str | None = field("why there is no prediction (covered false): a model or GPU the simulator does not cover",
                            TEXT)
    model_config: Mapping[str, Any] | None = field("the model's config.json as the simulator read it", OBJECT)

    @property
    def now(self) -> Prediction | Refit | None:
        """The prediction as it stands now: the latest refit that predicted again (it has a curve),
        else the prediction itself; None where it covers nothing (the same rule as
        kvtui.explore.predict_loop.current, which the run reads on its own dicts)."""
        if not self.covered:
            return None
        return next((r for r in reversed(self.refits or ()) if r.curve), self)


@dataclass(frozen=True)
class QualityTask(Document):
    """One quality task's answers in a mode (kvtui.quality.runner; a harness suite's through kvtui.quality.harness;
    the agreement task's outputs for the smoke comparator)."""

    task: str | None = field("the task's name (passkey, needles, quotation, agreement, a task file's or a suite's)",
                             TEXT)
    source: str | None = field("where its items came from, when not kvtui's own: the harness (\"lm-eval …\")", TEXT)
    scoring: str | None = field("how an answer is scored (exact, contains…; a harness suite's metric and filter)",
                                TEXT)
    not_run: str | None = field("why a harness suite did not run here (its figures are then null)", TEXT)
    n: int | None = field("items asked (null for a suite not run)", INT)
    correct: int | None = field("of them, answered right", INT)
    errors: int | None = field("of them, requests that failed (counted wrong); the agreement task's is a list of "
                               "\"id: why\", kept as it was", INT)
    accuracy: float | None = field("correct / n", NUMBER)
    ci: list[Any] | None = field("the accuracy's 95 % Wilson interval: [lo, hi]", LIST)
    by_length: Mapping[str, Any] | None = field("per prompt length (passkey, needles): [correct, n]", OBJECT)
    prompt_tokens_max: int | None = field("the longest prompt the server counted (tokens)", INT)
    items: list[Any] | None = field("each item: id, key, ok, got (the answer's start), text_sha, prompt_tokens, "
                                    "output_tokens, error (a harness item: value, answer, target)", LIST)
    prompt_digest: str | None = field("the agreement task: digest of its prompts", TEXT)
    outputs: list[Any] | None = field("the agreement task: each prompt's text, tokens, logprobs, finish_reason "
                                      "(null where it failed)", LIST)
    dataset: Any = field("a harness suite's dataset", ANY)
    num_fewshot: Any = field("a harness suite's shots, as applied", ANY)
    limit: Any = field("a harness suite's item limit", ANY)
    wall_s: float | None = field("a harness suite's wall time (s)", NUMBER)
    harness_score: Any = field("the harness's own figure for the suite", ANY)
    by_task: Mapping[str, Any] | None = field("a harness group's leaf tasks: [correct, n]", OBJECT)
    shots_note: str | None = field("why the shots applied differ from those asked for", TEXT)
    note: str | None = field("a remark on the scoring (a graded metric counted right at 1.0 only)", TEXT)


@dataclass(frozen=True)
class QualitySuite(Document):
    """The quality suite's run in a mode, before its load (kvtui.quality.runner.run_suite)."""

    wall_s: float | None = field("how long it took (s)", NUMBER)
    items: int | None = field("items asked", INT)
    items_digest: str | None = field("digest of the items (the same in every mode)", TEXT)
    lengths_exact: bool | None = field("prompt lengths counted by the server's tokenizer (false: estimated)", BOOL)
    started_at: float | None = field("when it started (epoch s)", NUMBER)
    ended_at: float | None = field("when it ended (epoch s)", NUMBER)
    concurrency: int | None = field("items in flight at most", INT)
    stopped: bool | None = field("the run was stopping: items not sent are errors", BOOL)


@dataclass(frozen=True)
class QualityAtKnee(Document):
    """The mode's quality items again while its knee's load ran (kvtui.explore.knee_quality), or why not."""

    skipped: str | None = field("why it was not measured (its other keys are then absent)", TEXT)
    load: float | None = field("the knee: the load in flight in all", NUMBER)
    generator_load: int | None = field("of it, the load generator's requests", INT)
    concurrency: int | None = field("of it, the quality items in flight at most", INT)
    wall_s: float | None = field("how long the items took (s)", NUMBER)
    started_at: float | None = field("when the items started (epoch s)", NUMBER)
    ended_at: float | None = field("when they ended (epoch s)", NUMBER)
    items: int | None = field("items asked", INT)
    tasks: Mapping[str, QualityTask] | None = field("the answers under load, per task (the suite's shape)",
                                                    by_name(QualityTask))
    load_requests: int | None = field("the load generator's requests that ran beside them", INT)
    harness_ready_s: float | None = field("how long lm-eval's worker took to prepare the suites (imports, datasets), "
                                          "before the load started, no request sent; absent without suites",
                                          NUMBER)
    load_error: str | None = field("why the load failed, if it did", TEXT)
    stopped: bool | None = field("the run was stopping", BOOL)
    preemptions: float | None = field("preemptions the server counted while the items ran (an upper bound for "
                                      "them alone)", NUMBER)
    kv_cache_usage_max: float | None = field("the KV cache's fullest share while they ran", NUMBER)
    vs_alone: Mapping[str, Any] | None = field("against the same mode's answers alone (kvtui.quality.under_load): "
                                               "tasks, changed, compared, paired, only_alone, only_load, delta_pt, "
                                               "delta_ci_pt, p_value, verdict", OBJECT)


@dataclass(frozen=True)
class Quality(Document):
    """A mode's quality pass, run before its load (docs/QUALITY.md); none of its requests counts in a step."""

    prompts: int | None = field("fixed prompts sent for the agreement check", INT)
    prompt_tokens: int | None = field("tokens per prompt", INT)
    max_tokens: int | None = field("tokens generated per prompt", INT)
    prompt_digest: str | None = field("digest of the prompts (two modes compare only on the same prompts)", TEXT)
    temperature: float | None = field("sampling temperature (0: greedy)", NUMBER)
    logprobs_requested: bool | None = field("whether logprobs were asked for", BOOL)
    outputs: list[Any] | None = field("each prompt's output text and logprobs", LIST)
    errors: list[Any] | None = field("prompts that failed, and why", LIST)
    logprobs: bool | None = field("whether the server returned logprobs", BOOL)
    wall_s: float | None = field("how long the pass took (s)", NUMBER)
    tasks: Mapping[str, QualityTask] | None = field("per task (passkey, quotation, agreement, a harness suite…): n, "
                                                    "correct, accuracy, CI", by_name(QualityTask))
    suite: QualitySuite | None = field("the suite's run: items, their digest, wall time", one(QualitySuite))
    skipped: str | None = field("why the pass did not run", TEXT)
    at_knee: QualityAtKnee | None = field("the same items sent while the knee's load ran: load, answers changed "
                                           "against alone, paired accuracy under load, agreement (exact, top-1, "
                                           "|Δ logprob|), preemptions met (or skipped: why)", one(QualityAtKnee))


@dataclass(frozen=True)
class EngineInfo(Document):
    """The labels that travel with every figure of a mode: which engine, which version, simulated or not."""

    engine: str | None = field("vllm, external or sim (or the tool an imported mode came from)", TEXT)
    simulated: bool | None = field("true when kvtui's simulator served it: every figure is SIMULATED", BOOL)
    version: str | None = field("the engine's version (vLLM's, or the simulator's \"kvtui-sim x.y\")", TEXT)
    command: list[Any] | None = field("the command line kvtui launched, secrets redacted (empty for an external "
                                      "server)", LIST)
    gpu_names: list[Any] | None = field("the GPUs it ran on (a simulated one says so)", LIST)
    dummy_weights: bool | None = field("served with dummy (random) weights: speed and memory only", BOOL)
    weights: str | None = field("where the weights came from, when known: \"dummy\", or \"real: <model>, …\" "
                                "for kvtui's own builds", TEXT)
    time_scale: float | None = field("the simulator's pace: wall seconds per modelled second (1.0 for a real "
                                     "server)", NUMBER)
    fast: bool | None = field("the offline fast simulator (no HTTP) measured it", BOOL)


@dataclass(frozen=True)
class ServerFacts(Document):
    """What a mode's server said about itself at startup (its log lines and /metrics); null: not reported."""

    weights_gib: float | None = field("the weights' memory (GiB)", NUMBER)
    kv_cache_gib: float | None = field("the KV cache's memory (GiB)", NUMBER)
    kv_cache_tokens: float | None = field("tokens the KV cache holds", NUMBER)
    max_concurrency_reported: float | None = field("the concurrency the server says its KV cache holds", NUMBER)
    max_concurrency_len: float | None = field("the tokens per request that figure assumes", NUMBER)
    cuda_graph_gib: float | None = field("CUDA graphs' memory (GiB)", NUMBER)
    activation_peak_gib: float | None = field("the activations' peak memory (GiB)", NUMBER)
    startup_s: float | None = field("launch to /health answering (s)", NUMBER)
    load_s: float | None = field("weight loading (s)", NUMBER)
    compile_s: float | None = field("torch.compile (s)", NUMBER)
    init_engine_s: float | None = field("profiling, creating the KV cache, warm-up (s)", NUMBER)
    compile_cache: str | None = field("torch.compile's cache at this start: hit, miss or cold", TEXT)
    compile_cache_dir: str | None = field("the compile cache's directory", TEXT)
    num_gpu_blocks: float | None = field("KV cache blocks", NUMBER)
    block_size: float | None = field("tokens per KV block", NUMBER)
    kv_cache_dtype: str | None = field("the KV cache's dtype as the server reports it", TEXT)
    device: str | None = field("GPU or CPU", TEXT)
    attention_backend: str | None = field("the attention backend", TEXT)
    max_num_seqs: float | None = field("the most requests it runs at once", NUMBER)
    max_num_batched_tokens: float | None = field("the most tokens in one batch", NUMBER)
    prefix_caching: bool | None = field("whether prefix caching was on", BOOL)
    gpu_total_gib: float | None = field("the GPU's memory (GiB)", NUMBER)
    gpu_memory_utilization: float | None = field("the share of GPU memory it may use", NUMBER)
    phases: list[Any] | None = field("the startup phases seen, in order", LIST)
    warnings: list[Any] | None = field("what the server warned of (uncalibrated fp8 KV scales…)", LIST)
    engines: float | None = field("data-parallel engines behind the endpoint (the KV figures are their sum)", NUMBER)
    source: str | None = field("where an imported mode's facts came from (its startup log)", TEXT)


@dataclass(frozen=True)
class Search(Document):
    """How a mode's search went and what it found (kvtui.core.search)."""

    strategy: str | None = field("the search: linear, fast (galloping), seeded (from the prediction) or imported",
                                 TEXT)
    guess: float | None = field("the load it started from (the KV-bound guess)", NUMBER)
    seed: float | None = field("a seeded search's start: the predicted knee", NUMBER)
    best: float | None = field("the max load meeting the SLO", NUMBER)
    first_fail: float | None = field("the first failing load above it", NUMBER)
    confirmed: bool | None = field("the best load passed again when measured again", BOOL)
    settled: Mapping[str, Any] | None = field("ramp.confirm_when = \"doubt\": the knee loads the confirmation did not "
                                              "repeat, each with why its verdict was settled without one", OBJECT)
    flips: int | None = field("how often the same load passed and failed", INT)
    noisy: bool | None = field("the knee is noisy: a load passed and failed", BOOL)
    reached_max: bool | None = field("every load it measured passed, up to ramp.max or the step list's end "
                                     "(the limit is higher)", BOOL)
    steps: int | None = field("steps it measured", INT)
    wall_s: float | None = field("its wall time (s)", NUMBER)
    describe: str | None = field("the answer in words (\"96 (next 128 fails), confirmed\")", TEXT)
    done: bool | None = field("it ended by itself (not stopped or skipped)", BOOL)
    skipped: bool | None = field("the user skipped to the next mode", BOOL)


@dataclass(frozen=True)
class Replica(Document):
    """One server of a mode that ran several replicas behind one router (docs/REPLICAS.md)."""

    name: str | None = field("the replica (r0, r1…)", TEXT)
    base_url: str | None = field("its OpenAI-compatible endpoint (loopback)", TEXT)
    metrics_url: str | None = field("its /metrics", TEXT)
    server: ServerFacts | None = field("its startup facts (as the mode's `server`)", one(ServerFacts))


@dataclass(frozen=True)
class ModeError(Document):
    """Why a mode has no result."""

    kind: str | None = field("what failed: crashed, oom_kv, bad_context, client, cancelled, lane, or the engine's "
                             "own kind of start failure", TEXT)
    message: str | None = field("what happened, in words", TEXT)
    log_tail: str | None = field("the server log's last lines, secrets redacted", TEXT)


@dataclass(frozen=True)
class Mode(Document):
    """One precision mode's entry: settings, what its server reported at startup, its steps, its answer."""

    name: str | None = field("the mode's name, from the scenario", TEXT)
    index: int | None = field("its place in the scenario's modes, from 0", INT)
    settings: Mapping[str, Any] | None = field("its settings as run: dtype, kv_cache_dtype, quantization, model, "
                                            "extra_args and env (secrets redacted)", OBJECT)
    engine: str | None = field("vllm, external or sim", TEXT)
    simulated: bool | None = field("true when kvtui's simulator served it, not a GPU", BOOL)
    server: ServerFacts | None = field("what its server said at startup: weights, KV cache, startup time, warnings…",
                                       one(ServerFacts))
    engine_info: EngineInfo | None = field("the engine: version, command line, GPU names, dummy or real weights",
                                           one(EngineInfo))
    best_concurrency: float | None = field("the max load meeting the SLO (null if none); a rate for open-loop runs",
                                           NUMBER)
    search: Search | None = field("the search's answer: best, first_fail, confirmed, flips, noisy, reached_max, "
                                  "describe…", one(Search))
    steps: tuple[Step, ...] | None = field("the steps, in the order they ran", many(Step))
    series: list[Any] | None = field("time series rows: t, load, phase, kv_usage, running, waiting, gpus[] "
                                     "(memory, power, clocks)…", LIST)
    complete: bool | None = field("false for a mode stopped mid-search (a resume continues it)", BOOL)
    started_at: float | None = field("when it started (epoch s)", NUMBER)
    endpoint: Mapping[str, Any] | None = field("the endpoint measured: base_url, model, max_model_len", OBJECT)
    token_space: Mapping[str, Any] | None = field("the prompt vocabulary and how it was verified", OBJECT)
    predicted_kv_concurrency: float | None = field("concurrency the KV cache holds, from the server's KV tokens",
                                                   NUMBER)
    knee_limited_by: str | None = field("what limited the first failing load above the best", TEXT)
    knee_interval: Mapping[str, Any] | None = field("the knee's interval: {lo, hi, method, confidence, n_boot, "
                                                 "pass_probability} (a monotone fit of each load's pass probability; "
                                                 "lo null: no measured load sure to pass)", OBJECT)
    finished_at: float | None = field("when it finished (epoch s)", NUMBER)
    ran_on: Mapping[str, Any] | None = field("the device: host, gpu_names, gpu_uuids, gpu_indices", OBJECT)
    prediction: Prediction | None = field("the simulator's prediction, before the first step", one(Prediction))
    prefix_cache_gain: Mapping[str, Any] | None = field(
        "what the prefix cache gives this mode (SIMULATED, kvtui.explore.prefix_gain), only where prefix caching "
        "is on and prompts share blocks: {knee, knee_no_cache, gain (knee − knee_no_cache), gain_pct, basis "
        "('simulated': the simulator's knee; 'predicted': both knees predicted, a real server's), "
        "no_cache_lower_bound, wall_s} or {skipped, why}", OBJECT)
    continued: Mapping[str, Any] | None = field("a mode a resume continued: steps kept, of how many, where they ran, "
                                             "and the startup_s of the servers the earlier runs started for it",
                                             OBJECT)
    replicas: tuple[Replica, ...] | None = field("its replicas, when it ran several servers", many(Replica))
    quality: Quality | None = field("its quality pass", one(Quality))
    error: ModeError | None = field("why it has no result", one(ModeError))
    imported_from: list[Any] | None = field("the `vllm bench` result files an imported mode was made from", LIST)
    records_file: str | None = field("an older resume's pointer to the earlier run's records sidecar, for a mode it "
                                     "kept (no longer written: a resume copies kept modes' records into its own)",
                                     TEXT)

    @property
    def all_steps(self) -> tuple[Step, ...]:
        return self.steps or ()

    @property
    def measured_steps(self) -> list[Step]:
        """The steps that ran to their end."""
        return [s for s in self.all_steps if s.ran_to_its_end]

    @property
    def first_fail(self) -> float | None:
        v = self.search.first_fail if self.search is not None else None
        return float(v) if v is not None else None

    @property
    def limit_is_higher(self) -> bool:
        """No measured load failed above its best: the knee is a floor. Derived as well as read, so a
        snapshot written before `reached_max` covered a step list ending below ramp.max says it too."""
        s = self.search
        if s is not None and s.reached_max:
            return True
        return self.best_concurrency is not None and self.first_fail is None and not self.has_error

    @property
    def is_simulated(self) -> bool:
        return bool(self.simulated or (self.engine_info is not None and self.engine_info.simulated))

    @property
    def info(self) -> EngineInfo:
        """`engine_info`, or an empty one where the mode has none."""
        return self.engine_info or EngineInfo()

    @property
    def facts(self) -> ServerFacts:
        """`server`, or an empty one where the mode has none."""
        return self.server or ServerFacts()

    @property
    def has_error(self) -> bool:
        """Whether it has an error, of any shape (an older snapshot's may be a bare string)."""
        return bool(self.error) or bool("error" in self.extras and self.extras["error"])

    @property
    def error_message(self) -> str | None:
        return self.error.message if self.error is not None else None


@dataclass(frozen=True)
class CostRange(Document):
    """The quality-adjusted $/Mtok out as a range (kvtui.quality.equivalence.cost_range)."""

    lo: float | None = field("its lowest: the knee at its interval's top, the accuracy at its interval's best", NUMBER)
    hi: float | None = field("its highest; null where the mode's accuracy may be 0 (the range is open)", NUMBER)
    knee_exact: bool | None = field("the knee taken as exact (no interval was known)", BOOL)
    quality_open: bool | None = field("the range has no top (`hi` null)", BOOL)
    knee_open: bool | None = field("the range has no top because the knee's interval has no lower end (`hi` null)",
                                   BOOL)


@dataclass(frozen=True)
class Equivalence(Document):
    """Equal quality within a margin, or not shown (kvtui.quality.equivalence.tost; the reference's says so)."""

    reference: bool | None = field("this is the reference mode (its other keys are then margin_pt only)", BOOL)
    margin_pt: float | None = field("the margin ([quality] tolerance_pt, accuracy points)", NUMBER)
    n: int | None = field("paired items", INT)
    test: str | None = field("the test (\"TOST, 95 %\")", TEXT)
    shown: bool | None = field("equal within the margin is shown", BOOL)
    delta_pt: float | None = field("the mode's accuracy − the reference's (points)", NUMBER)
    ci90_pt: list[Any] | None = field("its 90 % interval [lo, hi] (points)", LIST)
    items_needed: int | None = field("about how many paired items would show it (null: shown, or none would)", INT)


@dataclass(frozen=True)
class RowSuite(Document):
    """The quality suite's verdicts in a comparison row (kvtui.quality.verdict)."""

    tasks: Mapping[str, Any] | None = field("per task: accuracy, ci, n, errors, delta_pt, delta_ci_pt, p_value, "
                                            "verdict, flagged, equivalence (agreement: the smoke comparator's)",
                                            OBJECT)
    tolerance_pt: float | None = field("the accuracy drop within which a task is no regression (points)", NUMBER)
    flagged: bool | None = field("a task regressed", BOOL)
    cost_factor: float | None = field("reference pooled accuracy ÷ the mode's: what the q-adjusted $/Mtok multiplies "
                                      "by", NUMBER)
    pooled_accuracy: float | None = field("the mode's accuracy pooled over its ground-truth tasks", NUMBER)
    reference_pooled_accuracy: float | None = field("the reference's, over the same tasks", NUMBER)
    cost_factor_beyond_noise: bool | None = field("the accuracy drop behind the factor is beyond noise", BOOL)
    wall_s: float | None = field("how long the mode's quality phase took (s)", NUMBER)
    equivalence: Equivalence | None = field("pooled equivalence to the reference (TOST)", one(Equivalence))


@dataclass(frozen=True)
class RowAtKnee(Document):
    """The answers under the knee's load against the same mode alone, as a comparison row says them."""

    skipped: str | None = field("why they were not measured", TEXT)
    load: float | None = field("the knee's load they ran beside", NUMBER)
    changed: int | None = field("answers that changed under load", INT)
    compared: int | None = field("answers compared", INT)
    delta_pt: float | None = field("accuracy under load − alone (points)", NUMBER)
    delta_ci_pt: list[Any] | None = field("its 95 % interval [lo, hi] (points)", LIST)
    p_value: float | None = field("the paired test's p-value", NUMBER)
    verdict: str | None = field("within noise, regression…", TEXT)
    preemptions: float | None = field("preemptions the server counted meanwhile", NUMBER)
    top1_agreement: float | None = field("top-1 token agreement with the answers alone", NUMBER)


@dataclass(frozen=True)
class RowQuality(Document):
    """A mode's quality verdict against the reference mode (kvtui.explore.compare; kvtui.explore.quality)."""

    skipped: str | None = field("why there is none (its other keys are then absent)", TEXT)
    reference: bool | None = field("this is the reference mode", BOOL)
    prompts: int | None = field("fixed prompts compared", INT)
    exact_match_rate: float | None = field("share of outputs identical to the reference's", NUMBER)
    top1_agreement: float | None = field("share of positions whose top-1 token agrees, up to the first divergence",
                                         NUMBER)
    logprob_agreement: float | None = field("mean exp(−|Δ logprob|) over the shared tokens", NUMBER)
    mean_abs_logprob_diff: float | None = field("mean |Δ logprob| there", NUMBER)
    logprob_positions: int | None = field("positions the logprobs were compared at", INT)
    thresholds: Mapping[str, Any] | None = field("the flags' thresholds: min_exact_match, min_logprob_agreement",
                                                 OBJECT)
    flagged: bool | None = field("below a threshold, or a task regressed", BOOL)
    why: str | None = field("why it is flagged", TEXT)
    note: str | None = field("a remark (no logprobs to compare)", TEXT)
    suite: RowSuite | None = field("the quality suite's verdicts", one(RowSuite))
    at_knee: RowAtKnee | None = field("the answers under the knee's load against alone", one(RowAtKnee))


@dataclass(frozen=True)
class ComparisonRow(Document):
    """One mode's figures against the baseline (kvtui.explore.compare computes them)."""

    mode: str | None = field("the mode", TEXT)
    engine: str | None = field("its engine", TEXT)
    version: str | None = field("its engine's version", TEXT)
    simulated: bool | None = field("SIMULATED", BOOL)
    dummy_weights: bool | None = field("served with dummy (random) weights", BOOL)
    load_kind: str | None = field("concurrency, rate or trace", TEXT)
    best: float | None = field("max load at the SLO", NUMBER)
    best_lower_bound: bool | None = field("the best is a lower bound: no measured load failed above it (shown "
                                          "\"≥ N\")", BOOL)
    best_x_bound: str | None = field("how best_x reads where a knee is a lower bound: \"≥\", \"≤\" or \"?\" "
                                     "(both knees lower bounds)", TEXT)
    search: str | None = field("the search in words (\"160 (next 192 fails), confirmed\")", TEXT)
    knee_steps: int | None = field("passing steps at the best load", INT)
    knee_output_tok_s: float | None = field("their mean output tok/s", NUMBER)
    peak_load: float | None = field("the fastest load that met the SLO (where the @SLO rates come from)", NUMBER)
    output_tok_s: float | None = field("output tok/s @SLO (mean over the peak load's steps)", NUMBER)
    input_tok_s: float | None = field("input tok/s @SLO", NUMBER)
    total_tok_s: float | None = field("total tok/s @SLO", NUMBER)
    error_rate_at_knee: float | None = field("error rate at the best load", NUMBER)
    error_rate_at_peak: float | None = field("error rate at the peak load", NUMBER)
    preemptions_at_knee: float | None = field("most preemptions at the best load", NUMBER)
    prefix_cache_hit_rate_at_knee: float | None = field("prefix-cache hit rate there", NUMBER)
    kv_cache_usage_at_knee: float | None = field("fullest KV share there", NUMBER)
    next_load: float | None = field("the first failing load above the best", NUMBER)
    knee_limited_by: str | None = field("what limited it", TEXT)
    knee_limits: list[Any] | None = field("what limited each failing step at that load", LIST)
    knee_interval: Mapping[str, Any] | None = field("the knee's interval, as the mode's `knee_interval`", OBJECT)
    preemptions_next: float | None = field("its preemptions", NUMBER)
    peak_gpu_mem_gib: float | None = field("most GPU memory over every step (GiB)", NUMBER)
    peak_gpu_mem_gib_per_gpu: list[Any] | None = field("each GPU's peak (tensor parallel)", LIST)
    weights_gib: float | None = field("weights (GiB, from the server)", NUMBER)
    kv_cache_gib: float | None = field("KV cache (GiB)", NUMBER)
    kv_tokens: float | None = field("KV cache tokens", NUMBER)
    billed_share: float | None = field("share of GPU time billed to the counted tokens", NUMBER)
    usd_per_mtok_out: float | None = field("$ per million output tokens @SLO", NUMBER)
    usd_per_mtok_in: float | None = field("$ per million input tokens @SLO", NUMBER)
    warnings: list[Any] | None = field("the server's warnings", LIST)
    error: str | None = field("why it has no result", TEXT)
    complete: bool | None = field("whether its search finished", BOOL)
    best_x: float | None = field("best ÷ the baseline's", NUMBER)
    tok_s_x: float | None = field("output tok/s @SLO ÷ the baseline's", NUMBER)
    kv_tokens_x: float | None = field("KV tokens ÷ the baseline's", NUMBER)
    cost_out_change: float | None = field("$/Mtok out ÷ the baseline's − 1", NUMBER)
    cost_in_change: float | None = field("$/Mtok in ÷ the baseline's − 1", NUMBER)
    quality: RowQuality | None = field("the quality verdict against the reference mode", one(RowQuality))
    usd_per_mtok_out_qadj: float | None = field("quality-adjusted $/Mtok out", NUMBER)
    usd_per_mtok_in_qadj: float | None = field("quality-adjusted $/Mtok in", NUMBER)
    usd_per_mtok_out_qadj_range: CostRange | None = field("quality-adjusted $/Mtok out as a range (kvtui.quality."
                                                          "equivalence.cost_range)", one(CostRange))
    j_per_token_out: float | None = field("GPU energy per output token @SLO (J; NVML power, never the simulator's)",
                                          NUMBER)
    energy_change: float | None = field("J/token ÷ the baseline's − 1", NUMBER)


@dataclass(frozen=True)
class Comparison(Document):
    """The modes side by side against the baseline (the first mode with a result)."""

    baseline: str | None = field("the baseline mode", TEXT)
    note: str | None = field("why the baseline is not the first mode, or why there is none", TEXT)
    load_kind: str | None = field("concurrency, rate, trace or mixed", TEXT)
    cost: Mapping[str, Any] | None = field("the cost settings: gpu_hourly_usd, gpus, count_failed", OBJECT)
    quality_reference: str | None = field("the mode quality is compared against", TEXT)
    rows: tuple[ComparisonRow, ...] | None = field("one row per mode, in the modes' order", many(ComparisonRow))


@dataclass(frozen=True)
class Environment(Document):
    """Where the run was measured."""

    host: str | None = field("the host's name", TEXT)
    platform: str | None = field("OS and kernel", TEXT)
    python: str | None = field("Python's version", TEXT)
    kvtui_version: str | None = field("kvtui's version", TEXT)
    engine: str | None = field("vllm, external or sim", TEXT)
    simulated: bool | None = field("true for the simulator: every figure is SIMULATED", BOOL)
    started_at: float | None = field("when the run started (epoch s)", NUMBER)
    t0_epoch: float | None = field("the run's clock origin (epoch s)", NUMBER)
    gpu_names: list[Any] | None = field("the GPUs (a simulated one says so)", LIST)
    gpu_memory_gib: list[Any] | None = field("each GPU's memory (GiB)", LIST)
    driver: str | None = field("the NVIDIA driver", TEXT)
    cuda: str | None = field("the CUDA version", TEXT)
    gpu_count: int | None = field("how many GPUs", INT)
    gpu_uuids: list[Any] | None = field("the GPUs' UUIDs", LIST)
    gpu_indices: list[Any] | None = field("their indices", LIST)
    joined_on: Any = field("the environments of snapshots a resume joined", ANY)
    gpu_telemetry: str | None = field("why there is no GPU telemetry", TEXT)
    imported: bool | None = field("the run was imported (kvtui import), not measured by kvtui", BOOL)


@dataclass(frozen=True)
class RunInfo(Document):
    """How the run went."""

    salt: str | None = field("the run's salt (request ids, prompts)", TEXT)
    fast: bool | None = field("the offline fast simulator ran it", BOOL)
    modes_requested: list[Any] | None = field("the modes asked for", LIST)
    t0_monotonic: float | None = field("the run's start on the monotonic clock", NUMBER)
    finished: bool | None = field("whether it ran to its end", BOOL)
    stop_reason: str | None = field("why it stopped early", TEXT)
    records_written: int | None = field("per-request records in the sidecar", INT)
    wall_s: float | None = field("its wall time (s)", NUMBER)
    outcome: str | None = field("\"finished\", or \"stopped\" for a run stopped before its modes finished", TEXT)
    modes_not_run: list[Any] | None = field("modes a stopped run never started", LIST)
    modes_cut: list[Any] | None = field("modes a stopped run cut short mid-search", LIST)
    imported: bool | None = field("the run was imported (kvtui import), not measured by kvtui", BOOL)


@dataclass(frozen=True)
class Run(Document):
    """A snapshot: one run, as a versioned JSON file (kvtui.io.snapshot.file writes and reads it)."""

    schema: str | None = field(f"the version: \"{SCHEMA}\"", TEXT)
    kvtui_version: str | None = field("the kvtui that ran it", TEXT)
    scenario: Mapping[str, Any] | None = field("the scenario as run, secrets removed (kvtui.io.scenario's schema)",
                                            OBJECT)
    environment: Environment | None = field("where it ran", one(Environment))
    run: RunInfo | None = field("how it went", one(RunInfo))
    modes: tuple[Mode, ...] | None = field("the modes, in the scenario's order", many(Mode))
    resumed_from: Mapping[str, Any] | None = field("the snapshot(s) a resume kept steps from", OBJECT)
    trace: Mapping[str, Any] | None = field("[workload] trace's summary, read before any server started: file, "
                                         "layout, selection, rows, skipped, duration_s, mean_rate_rps, "
                                         "interarrival_cv, input_tokens and output_tokens {mean, std, p50, p95, "
                                         "p99, max}, io_correlation, percentiles (exact or a reservoir's), "
                                         "prefix_shared (share of prompt tokens an earlier request sent)", OBJECT)
    records: str | None = field("the per-request records' sidecar (JSON Lines), beside the snapshot", TEXT)
    comparison: Comparison | None = field("the modes against the baseline", one(Comparison))
    finalized_at: float | None = field("when the snapshot was finalised (epoch s); absent in a journal", NUMBER)
    notes: list[Any] | None = field("what a reader must know about the run", LIST)
    warnings: list[Any] | None = field("warnings of the run (modes joined from several devices…)", LIST)
    frozen: Any = field("set on test data frozen from a run", ANY)
    imported: Mapping[str, Any] | None = field("an imported run's origin: {tool, files, logs, note} (kvtui import)",
                                               OBJECT)
    load_warnings: list[Any] | None = field("set by the reader, never stored: a damaged, truncated or "
                                            "unknown-version file", LIST)

    @property
    def all_modes(self) -> tuple[Mode, ...]:
        return self.modes or ()

    def mode(self, name: str) -> Mode | None:
        return next((m for m in self.all_modes if m.name == name), None)


DOCUMENTS: tuple[type[Document], ...] = (Run, Environment, RunInfo, Mode, EngineInfo, ServerFacts, Search, ModeError,
                                         Step, SloCheck, Distribution, StepPrediction, Deciding, Prediction, CurvePoint,
                                         PredictionError, Refit, Quality, QualityTask, QualitySuite,
                                         QualityAtKnee, Replica, ReplicaStep,
                                         ReplicaLost, Comparison, ComparisonRow, RowQuality, RowSuite,
                                         Equivalence, RowAtKnee, CostRange)


def read_run(doc: Mapping[str, Any]) -> Run:
    """A snapshot document (as kvtui.io.snapshot.file.load_snapshot gives it), typed."""
    return Run.from_dict({k: v for k, v in doc.items() if not k.startswith("_")})
