"""The rules a parsed scenario must meet beyond its types: ranges, names, addresses, datasets,
the context budget, quality tasks, environment trust. Each problem names its field."""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path

from kvtui.io.scenario.convert import _Problems, _suggest
from kvtui.io.scenario.schema import (
    APIS,
    ARRIVALS,
    CONFIRM_WHEN,
    ENGINES,
    LOAD_SHAPES,
    PROTOCOLS,
    QUALITY_TASKS,
    RANGES,
    RETIRED_PROTOCOLS,
    ROUTINGS,
    SEARCHES,
    Scenario,
    hijacks,
    listens,
    out_of_range,
)

_STEP = re.compile(r"^(double|x\d+(\.\d+)?|\+\d+(\.\d+)?|\d+(\.\d+)?(\s*,\s*\d+(\.\d+)?)*)$")
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
MAX_LOAD = 1_000_000  # beyond any server: a typo, and the search would take 40+ steps to get there
MIN_RATE = 0.001  # req/s: one request in 17 minutes
MAX_LEVELS = 10_000  # loads a ramp may list (each is a step of seconds to minutes)


def _check_quality(sc: Scenario, probs: _Problems) -> None:
    """[quality]: known task names, task files that exist, counts and lengths in range."""
    q = sc.quality
    for t in q.tasks:
        if t not in QUALITY_TASKS:
            probs.add(("quality", "tasks"), f"unknown task {t!r}" + _suggest(t, list(QUALITY_TASKS)))
    for key, lo, hi in (("items", 0, 10_000), ("concurrency", 1, 256), ("max_context", 0, 10_000_000),
                        ("prompts", 0, 10_000), ("prompt_tokens", 1, 10_000_000), ("max_tokens", 1, 100_000)):
        v = getattr(q, key)
        if not lo <= v <= hi:
            probs.add(("quality", key), f"must be from {lo:,} to {hi:,}, got {v!r}")
    if not 0 <= q.tolerance_pt <= 100:
        probs.add(("quality", "tolerance_pt"), f"must be from 0 to 100 percentage points, got {q.tolerance_pt:g}")
    for n in q.lengths:
        if not 64 <= n <= 10_000_000:
            probs.add(("quality", "lengths"), f"each length must be from 64 tokens up, got {n}")
        elif sc.server.max_model_len and n > sc.server.max_model_len:
            probs.add(("quality", "lengths"), f"{n} is above server.max_model_len ({sc.server.max_model_len})")
    base = Path(sc.source).parent if sc.source else Path(".")
    for i, f in enumerate(q.task_files):
        path = Path(f) if Path(f).is_absolute() else base / f
        if not path.is_file():
            probs.add(("quality", "task_files"), f"{f!r}: no such task file")
        else:
            q.task_files[i] = str(path)
    _check_suites(sc, probs, base)


_SUITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
SUITE_APIS = ("chat", "completions")  # the harness's local-chat-completions / local-completions


def _check_suites(sc: Scenario, probs: _Problems, base: Path) -> None:
    """[quality] suites (lm-evaluation-harness task names), their folders and settings. The names
    themselves are the harness's to know: one it lacks is marked "not run" with a suggestion."""
    q = sc.quality
    for s in q.suites:
        if not isinstance(s, str) or not _SUITE_NAME.match(s):
            probs.add(("quality", "suites"), f"{s!r} is not a harness task name (letters, digits, _ . -)")
    if len(set(q.suites)) != len(q.suites):
        probs.add(("quality", "suites"), "a suite is named twice")
    clash = set(q.suites) & set(QUALITY_TASKS)
    if clash:
        probs.add(("quality", "suites"), f"{sorted(clash)[0]!r} is a built-in task: list it in quality.tasks")
    if q.suite_api not in SUITE_APIS:
        probs.add(("quality", "suite_api"), f"must be one of {', '.join(SUITE_APIS)}, got {q.suite_api!r}"
                  + _suggest(str(q.suite_api), SUITE_APIS))
    if not 0 <= q.suite_limit <= 1_000_000:
        probs.add(("quality", "suite_limit"), f"must be from 0 (all) to 1,000,000 items, got {q.suite_limit!r}")
    if not -1 <= q.suite_fewshot <= 100:
        probs.add(("quality", "suite_fewshot"), f"must be from -1 (the task's own) to 100, got {q.suite_fewshot!r}")
    for i, f in enumerate(q.suite_paths):
        path = Path(f) if Path(f).is_absolute() else base / f
        if not path.is_dir():
            probs.add(("quality", "suite_paths"), f"{f!r}: no such folder of task YAML")
        else:
            q.suite_paths[i] = str(path)


def _ranges(sc: Scenario, probs: _Problems) -> None:
    """Every numeric field within its sane range (schema.RANGES), unless a check named it already."""
    named = set(probs.items)
    for (section, key), _ in RANGES.items():
        if section in ("slo", "length"):
            continue  # checked where they are read (_slo, _length)
        holder = sc if not section else getattr(sc, section)
        v = getattr(holder, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        why = out_of_range((section, key), v)
        dotted = f"{section}.{key}" if section else key
        if why and not any(f": {dotted}: " in item for item in named):
            probs.add((section, key) if section else (key,), why)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# C0 and DEL, and C1 (U+0080–U+009F: U+0085 is a line break, U+009B a terminal's CSI).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# What kvtui sets on the server's command line: an extra_args spelling of one (--host=0.0.0.0,
# --host 0.0.0.0, an abbreviation argparse accepts such as --hos, --api_key with vLLM's
# underscore spelling) would open the server beyond loopback, or change its key or port.
# So would one that moves the API server elsewhere (a Unix socket, none at all, TLS that kvtui's
# plain-HTTP loopback client cannot speak: each once left the start waiting for its timeout) or
# makes a data-parallel rank listen on an address.
OWNED_FLAGS = ("--host", "--port", "--api-key", "--uds", "--headless", "--ssl-keyfile", "--ssl-certfile",
               "--ssl-ca-certs", "--ssl-cert-reqs", "--data-parallel-address", "--data-parallel-rpc-port")


def _flag_name(arg: str) -> str | None:
    """`arg`'s flag name, lower case with dashes (`--api_key=k` → `--api-key`), or None for a value."""
    if not arg.startswith("--"):
        return None
    return arg.split("=", 1)[0].replace("_", "-").lower()


def owned_flag(arg: str) -> str | None:
    """The kvtui-owned flag `arg` spells (exactly, abbreviated, with =value or _), or None."""
    name = _flag_name(arg)
    if name is None or len(name) < 4:  # "--h", "--p": argparse finds them ambiguous (--help, --pipeline-…)
        return None
    return next((f for f in OWNED_FLAGS if f.startswith(name)), None)


# Flags that make vLLM load code named by the scenario: a model repository's own Python
# (--trust-remote-code), a plugin file (--tool-parser-plugin), a class or module by import path
# (--worker-extension-cls, --middleware, --logits-processors, a kv connector's module_path in
# --kv-transfer-config). The same rule as the environment's: known flags in any abbreviation,
# any flag whose name holds a code word, and any JSON value whose keys do.
CODE_FLAGS = ("--trust-remote-code", "--tool-parser-plugin", "--reasoning-parser-plugin", "--middleware",
              "--worker-extension-cls", "--worker-cls", "--logits-processors", "--logits-processor-pattern",
              "--kv-transfer-config", "--kv-events-config", "--distributed-executor-backend", "--hf-overrides")
CODE_WORDS = ("plugin", "module", "cls", "class", "middleware", "processor", "extension", "hook", "remote-code",
              "script", "import", "exec", "connector", "backend")
CODE_VALUE_WORDS = ("plugin", "module", "cls", "class", "path", "dir", "file", "cache", "backend", "hook", "script",
                    "import", "exec", "connector", "auto_map", "remote")


def code_flag(arg: str) -> str | None:
    """Why the extra_args word `arg` makes the server load code named by the scenario, or None."""
    name = _flag_name(arg)
    if name is not None:
        if len(name) >= 5 and any(f.startswith(name) for f in CODE_FLAGS):
            return "makes the server load code named in the scenario"
        if any(w in name for w in CODE_WORDS):
            return "names code for the server to load (a plugin, module, class or remote code)"
    # a JSON value (after its flag, or joined to it with '='): the names of its keys, at any depth
    text = arg if name is None else (arg.split("=", 1)[1] if "=" in arg else "")
    if text.lstrip().startswith("{"):
        keys = _json_keys(text)
        if any(w in k for k in keys for w in CODE_VALUE_WORDS):
            return "holds a configuration naming code, a path or a cache for the server to load"
    return None


def _json_keys(text: str) -> list[str]:
    """Every key of a JSON object, lower case, at any depth; for text that is not JSON (vLLM may
    read it another way), the whole text as one 'key' (the rule errs towards asking)."""
    from kvtui.safeio import loads

    try:
        doc = loads(text)
    except ValueError:
        return [text.lower()]
    keys, stack = [], [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            keys += [str(k).lower() for k in x]
            stack += list(x.values())
        elif isinstance(x, list):
            stack += x
    return keys


def _check_strings(sc: Scenario, probs: _Problems) -> None:
    """What reaches a command line or an environment: no NUL (exec refuses it), env names that are names."""
    s = sc.server
    holders = [(("server",), s.env, s.extra_args)] + [(("modes", i), m.env, m.extra_args)
                                                      for i, m in enumerate(sc.modes)]
    for path, env, args in holders:
        for k, v in env.items():
            if not _ENV_NAME.match(k):
                probs.add(path + ("env", k),
                          f"not an environment variable name (letters, digits, _; not empty, no '='): {k!r}")
            elif "\0" in v:
                probs.add(path + ("env", k), "must not contain a NUL character")
        for j, a in enumerate(args):
            if "\0" in a:
                probs.add(path + ("extra_args",), f"argument {j + 1} contains a NUL character")
            elif (flag := owned_flag(a)) is not None:
                probs.add(path + ("extra_args",), f"argument {j + 1} {a.split('=', 1)[0]!r} sets {flag}, which kvtui "
                                                   "sets itself (loopback, a free port, a per-run API key): refused; "
                                                   f"use server.{flag[2:].replace('-', '_')} where there is one")
    for path, value in [(("server", "model"), s.model), (("server", "served_model_name"), s.served_model_name),
                        (("server", "host"), s.host), (("server", "gpu"), s.gpu), (("server", "url"), s.url),
                        (("server", "metrics_url"), s.metrics_url), (("workload", "dataset"), sc.workload.dataset),
                        (("name",), sc.name), (("description",), sc.description), (("server", "api_key"), s.api_key)] \
            + [(("server", "replica_urls", i), u) for i, u in enumerate(s.replica_urls)] \
            + [(("server", "metrics_urls", i), u) for i, u in enumerate(s.metrics_urls)] \
            + [(("modes", i, "model"), m.model) for i, m in enumerate(sc.modes)] \
            + [(("modes", i, key), getattr(m, key)) for i, m in enumerate(sc.modes)
               for key in ("dtype", "kv_cache_dtype", "quantization")]:
        if value and _CONTROL.search(value):
            shown = "a value with one (not shown: a secret)" if path == ("server", "api_key") else repr(value)
            probs.add(path, f"must not contain control characters (NUL, escape sequences), got {shown}")


def _check_replicas(sc: Scenario, probs: _Problems) -> None:
    """Replica lists (external), launched replicas (sim, vllm), data parallel, routing."""
    s = sc.server
    if s.routing not in ROUTINGS:
        probs.add(("server", "routing"), f"must be one of {', '.join(ROUTINGS)}, got {s.routing!r}"
                  + _suggest(s.routing, ROUTINGS))
    if (s.replica_urls or s.metrics_urls) and s.engine != "external":
        key = "replica_urls" if s.replica_urls else "metrics_urls"
        probs.add(("server", key), f"only for the external engine (engine {s.engine!r} launches its own: "
                                   "server.replicas = N)")
    if s.replicas > 1 and s.engine == "external":
        probs.add(("server", "replicas"), "the external engine takes its replicas as replica_urls = [\"http://…\", …]")
    if s.data_parallel_size > 1 and s.engine == "external":
        probs.add(("server", "data_parallel_size"), "the external engine does not launch vLLM: list the ranks' "
                                                   "/metrics in metrics_urls, or point url at the DP head")
    if s.replicas > 1 and s.url and s.engine != "external":
        probs.add(("server", "url"), f"engine {s.engine!r} launches its {s.replicas} replicas itself: url is for "
                                     "the external engine; give replicas or url, not both")
    else:
        # A launching engine ignored them silently (it measures its own server, not the one named).
        for key in ("url", "metrics_url"):
            if getattr(s, key) and s.engine in ("sim", "vllm"):
                probs.add(("server", key), f"only for the external engine: engine {s.engine!r} launches its own "
                                           f"server and measures that one (engine = \"external\" to measure a "
                                           "running server)")
    if s.replica_urls and s.url:
        probs.add(("server", "url"), "give either url (one server or a gateway, with metrics_urls) or replica_urls "
                                     "(kvtui spreads the requests), not both")
    if s.replica_urls and s.metrics_urls and len(s.metrics_urls) != len(s.replica_urls):
        probs.add(("server", "metrics_urls"), f"{len(s.metrics_urls)} URLs for {len(s.replica_urls)} replica_urls: "
                                              "one per replica (or none: <replica>/metrics)")
    from urllib.parse import urlsplit

    for key in ("url", "metrics_url", "replica_urls", "metrics_urls"):
        val = getattr(s, key)
        for i, u in enumerate([val] if isinstance(val, str) else list(val or [])):
            try:
                parts = urlsplit(u)
            except ValueError:
                continue
            if parts.query or parts.fragment:
                # kvtui adds its paths (/v1/models, /metrics) to the URL: a query there made
                # `…/v1?api_key=K/v1/models` (404), and a key in it would be stored and printed.
                probs.add(("server", key), f"{'entry ' + str(i + 1) + ' ' if key.endswith('s') else ''}has a query "
                          "string or fragment (?…/#…): not kept, kvtui adds its own paths to the URL; give the key "
                          "as server.api_key (the URL is not repeated here)")
    for key in ("replica_urls", "metrics_urls"):
        urls = getattr(s, key)
        for i, u in enumerate(urls):
            if _CONTROL.search(u) or not re.match(r"^https?://[^/\s]+", u):
                probs.add(("server", key), f"entry {i + 1} is not an http(s) URL: {u[:80]!r}")
        if len(set(urls)) != len(urls):
            probs.add(("server", key), "lists the same URL twice")


def protocol_problem(protocol: str) -> str | None:
    """Why `ramp.protocol` cannot measure a new run (None: it can). A retired protocol's own words
    (the classic one, issue 46): its old snapshots are still read, never measured more of."""
    if protocol in RETIRED_PROTOCOLS:
        return (f"the {protocol} protocol was retired ({RETIRED_PROTOCOLS[protocol]}): leave ramp.protocol out "
                f"for the default, {PROTOCOLS[0]!r} (docs/PROTOCOL.md); old snapshots measured with it still "
                "replay, export, diff and re-evaluate")
    if protocol not in PROTOCOLS:
        return f"must be one of {', '.join(PROTOCOLS)}, got {protocol!r}" + _suggest(protocol, PROTOCOLS)
    return None


def _check(sc: Scenario, probs: _Problems) -> None:
    s, w, r = sc.server, sc.workload, sc.ramp
    if s.engine not in ENGINES:
        probs.add(("server", "engine"),
                  f"must be one of {', '.join(ENGINES)}, got {s.engine!r}" + _suggest(s.engine, ENGINES))
    if s.engine == "external" and not s.url and not s.replica_urls:
        probs.add(("server", "url"), "the external engine needs the server's URL, e.g. url = \"http://127.0.0.1:8000\"")
    _check_replicas(sc, probs)
    if s.engine == "vllm" and not (s.model or all(m.model for m in sc.modes)):
        probs.add(("server", "model"), "the vllm engine needs a model (a Hugging Face name or a local directory)")
    if s.max_model_len < 16:
        probs.add(("server", "max_model_len"), f"must be ≥ 16 tokens, got {s.max_model_len}")
    if not 0 < s.gpu_memory_utilization <= 1:
        probs.add(("server", "gpu_memory_utilization"), f"must be in (0, 1], got {s.gpu_memory_utilization:g}")
    for key in ("kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens", "port"):
        if getattr(s, key) < 0:
            probs.add(("server", key), "must be ≥ 0")
    if s.tensor_parallel_size < 1:
        probs.add(("server", "tensor_parallel_size"), "must be ≥ 1")
    if not 0 <= s.port <= 65535:
        probs.add(("server", "port"), "must be a TCP port (0 for a free one)")
    if s.startup_timeout_s <= 0:
        probs.add(("server", "startup_timeout_s"), "must be > 0")
    try:
        if not ipaddress.ip_address(s.host).is_loopback:
            sc.warnings.append(
                f"server.host = {s.host!r} is not loopback: the server will be reachable from the network"
            )
    except ValueError:
        if s.host != "localhost":
            probs.add(("server", "host"), f"must be an IP address (default 127.0.0.1), got {s.host!r}")
    names = set()
    for i, m in enumerate(sc.modes):
        if not m.name or not re.match(r"^[A-Za-z0-9_.+][A-Za-z0-9_.+\-]*$", m.name) or len(m.name) > 64:
            # Not starting with '-': a mode name becomes a command-line value (`--mode NAME`, the
            # simulator's --mode), where `--help` would be read as an option.
            probs.add(("modes", i, "name"),
                      f"must be a short name of letters, digits, _ . + - (not starting with -), got {m.name!r}")
        if m.name in names:
            probs.add(("modes", i, "name"), f"duplicate mode name {m.name!r}")
        names.add(m.name)
        if m.kv_cache_dtype not in KV_DTYPES:
            probs.add(("modes", i, "kv_cache_dtype"),
                      f"must be one of {', '.join(KV_DTYPES)}, got {m.kv_cache_dtype!r}")
    _check_strings(sc, probs)
    if w.api not in APIS:
        probs.add(("workload", "api"), f"must be one of {', '.join(APIS)}, got {w.api!r}" + _suggest(w.api, APIS))
    if not 0 <= w.shared_prefix < 1:
        probs.add(("workload", "shared_prefix"), f"must be a share in [0, 1), got {w.shared_prefix:g}")
    if w.temperature < 0:
        probs.add(("workload", "temperature"), "must be ≥ 0")
    if w.turns < 1:
        probs.add(("workload", "turns"), "must be ≥ 1")
    if not 0 <= w.jitter < 1:
        probs.add(("workload", "jitter"), "must be a share in [0, 1)")
    if w.dataset:
        ds = Path(w.dataset)
        if not ds.is_absolute() and sc.source:
            ds = Path(sc.source).parent / ds
        if not ds.is_file():
            from kvtui.safeio import input_problem

            why = input_problem(ds) if ds.exists() else None  # a device, a FIFO, a folder: said as what it is
            probs.add(("workload", "dataset"), f"{ds} {why}" if why else f"no such file: {ds}")
        else:
            w.dataset = str(ds)
            from kvtui.errors import UsageError
            from kvtui.io.scenario.dataset import Dataset

            try:  # every row now, not after the server started (two tracebacks)
                Dataset(w.dataset)
            except UsageError as e:
                probs.add(("workload", "dataset"), str(e))
    if w.trace:
        _check_trace(sc, probs)
    else:
        for key in ("prompt_tokens", "output_tokens"):
            if getattr(w, key).dist == "trace":
                probs.add(("workload", key), "dist = \"trace\" is set from [workload] trace, and there is none")
    # ISL + OSL must fit in the context, for every turn of a conversation.
    need = (w.prompt_tokens.upper + w.output_tokens.upper) * w.turns
    if not w.dataset and not w.trace and need > s.max_model_len:
        where = ("workload", "prompt_tokens")
        if probs.index is not None and not probs.index.line(where) and probs.index.line(("server", "max_model_len")):
            # The file sets only the context length: point there, the workload is the default one.
            where = ("server", "max_model_len")
        probs.add(
            where,
            f"prompt + output tokens can reach {need} (× {w.turns} turns) > server.max_model_len {s.max_model_len}",
        )
    if r.load not in LOAD_SHAPES:
        probs.add(("ramp", "load"),
                  f"must be one of {', '.join(LOAD_SHAPES)}, got {r.load!r}" + _suggest(r.load, LOAD_SHAPES))
    if r.search not in SEARCHES:
        probs.add(("ramp", "search"), f"must be one of {', '.join(SEARCHES)}, got {r.search!r}")
    why = protocol_problem(r.protocol)
    if why:
        probs.add(("ramp", "protocol"), why)
    if r.confirm_when not in CONFIRM_WHEN:
        probs.add(("ramp", "confirm_when"), f"must be one of {', '.join(CONFIRM_WHEN)}, got {r.confirm_when!r}"
                  + _suggest(r.confirm_when, CONFIRM_WHEN))
    if not 0.5 <= r.confidence < 1:
        probs.add(("ramp", "confidence"), f"must be in [0.5, 1), got {r.confidence:g}")
    if r.arrival not in ARRIVALS:
        probs.add(("ramp", "arrival"), f"must be one of {', '.join(ARRIVALS)}, got {r.arrival!r}")
    if r.start <= 0:
        probs.add(("ramp", "start"), f"must be > 0, got {r.start:g}")
    if r.max < r.start:
        probs.add(("ramp", "max"), f"must be ≥ ramp.start ({r.start:g}), got {r.max:g}")
    if r.load == "concurrency":  # each field at its own line: `max = 8.5` was once reported at ramp.start
        for key, v in (("start", r.start), ("max", r.max)):
            if v != int(v):
                probs.add(("ramp", key), f"concurrency steps are whole numbers of requests, got {v:g}")
    rule = r.step.strip()
    if not _STEP.match(rule):
        probs.add(("ramp", "step"), f"must be 'double', 'xN', '+N' or a list 'a,b,c', got {r.step!r}")
    elif rule.startswith("x") and float(rule[1:]) <= 1:
        probs.add(("ramp", "step"), f"a geometric step must grow (xN with N > 1), got {r.step!r}")
    elif rule.startswith("+") and float(rule[1:]) <= 0:
        probs.add(("ramp", "step"), f"a linear step must be > 0, got {r.step!r}")
    elif rule[0] in "x+" and 0 < r.start <= r.max:
        n = float(rule[1:])
        closed = r.load == "concurrency"  # closed loop: at least one more request per level
        levels = ((r.max - r.start) / (max(n, 1.0) if closed else n) if rule[0] == "+"
                  else math.log(r.max / r.start) / math.log(n))
        if closed:
            levels = min(levels, r.max - r.start)
        if levels > MAX_LEVELS:
            probs.add(("ramp", "step"),
                      f"{r.step!r} from {r.start:g} to {r.max:g} makes {levels:,.0f} levels (at most {MAX_LEVELS:,})")
    if r.max > MAX_LOAD:
        probs.add(("ramp", "max"), f"must be ≤ {MAX_LOAD:,} (requests in flight or req/s), got {r.max:g}")
    if r.load == "trace":
        from kvtui.io.scenario.trace import MAX_FACTOR, MIN_FACTOR

        if not w.trace:
            probs.add(("ramp", "load"),
                      'load = "trace" replays [workload] trace\'s arrival times: set [workload] trace = "FILE"')
        for key, v in (("start", r.start), ("max", r.max)):
            if not MIN_FACTOR <= v <= MAX_FACTOR:
                probs.add(("ramp", key),
                          f"a trace's speed-up factor must be in [{MIN_FACTOR:g}, {MAX_FACTOR:g}], got {v:g}")
    if r.load == "rate" and 0 < r.start < MIN_RATE:
        probs.add(("ramp", "start"), f"a request rate must be ≥ {MIN_RATE:g} req/s, got {r.start:g}")
    if r.window_s <= 0 and r.window_requests <= 0:
        probs.add(("ramp", "window_s"), "a measurement window needs window_s > 0 or window_requests > 0")
    for key in ("warmup_s", "request_timeout_s", "drain_timeout_s"):
        if getattr(r, key) < 0:
            probs.add(("ramp", key), "must be ≥ 0")
    if r.processes < 1:
        probs.add(("ramp", "processes"), "must be ≥ 1")
    if r.min_samples < 1:
        probs.add(("ramp", "min_samples"), "must be ≥ 1")
    if sc.cost.gpu_hourly_usd < 0:
        probs.add(("cost", "gpu_hourly_usd"), "must be ≥ 0")
    _ranges(sc, probs)


def _check_trace(sc: Scenario, probs: _Problems) -> None:
    """[workload] trace: the file, its layout and every row read now (one pass, streamed), before any
    server starts; its summary is kept for the run (kvtui.io.scenario.trace.summary caches it)."""
    from kvtui.io.scenario.trace import COLUMN_KEYS, FORMATS, TIME_UNITS, TraceSpec, summary

    w, s = sc.workload, sc.server
    bad = False
    if w.trace_format not in FORMATS:
        probs.add(("workload", "trace_format"), f"must be one of {', '.join(FORMATS)}, got {w.trace_format!r}"
                  + _suggest(w.trace_format, FORMATS))
        bad = True
    for k, v in w.trace_columns.items():
        if k not in COLUMN_KEYS:
            probs.add(("workload", "trace_columns", k), "unknown key" + _suggest(k, COLUMN_KEYS))
            bad = True
        elif k == "time_unit" and v not in TIME_UNITS:
            probs.add(("workload", "trace_columns", k), f"must be one of {', '.join(TIME_UNITS)}, got {v!r}")
            bad = True
    if w.trace_end_s and w.trace_end_s <= w.trace_start_s:
        probs.add(("workload", "trace_end_s"), f"must be > trace_start_s ({w.trace_start_s:g}), got {w.trace_end_s:g}")
        bad = True
    if w.dataset:
        probs.add(("workload", "trace"), "a trace and a dataset cannot both give the requests: choose one")
        bad = True
    if w.turns > 1:
        probs.add(("workload", "turns"), "a trace gives each request's whole prompt: turns must be 1 with a trace "
                                          "(a session id column shares a conversation's prefix)")
        bad = True
    tr = Path(w.trace)
    if not tr.is_absolute() and sc.source:
        tr = Path(sc.source).parent / tr
    if not tr.is_file():
        from kvtui.safeio import input_problem

        why = input_problem(tr) if tr.exists() else None
        probs.add(("workload", "trace"), f"{tr} {why}" if why else f"no such file: {tr}")
        return
    w.trace = str(tr)
    if bad:
        return
    from kvtui.errors import UsageError

    try:  # every row now, not after a server started
        summ = summary(TraceSpec.of(w), sc.seed)
    except UsageError as e:
        probs.add(("workload", "trace"), str(e))
        return
    if sc.ramp.load == "trace" and not summ.get("duration_s"):
        probs.add(("ramp", "load"), f'load = "trace" replays the trace\'s arrival times, and its {summ["rows"]:,} '
                                    "row(s) have none to replay (no time column, or one instant): use load = "
                                    '"rate" or "concurrency" with its lengths')
    # Everything that reasons about a typical request (the KV-bound guess, the simulator's typical
    # request, the request-duration estimate, the settled arithmetic) reads these: the trace's own.
    from kvtui.io.scenario.schema import Length

    for key in ("prompt_tokens", "output_tokens"):
        d = summ["input_tokens" if key == "prompt_tokens" else "output_tokens"]
        setattr(w, key, Length(dist="trace", mean=float(d["mean"]), std=float(d["std"]), min=1, max=int(d["max"])))
    over = summ["max_request_tokens"]
    if over > s.max_model_len:
        sc.warnings.append(f"workload.trace: a request reaches {over:,} input + output tokens > server.max_model_len "
                           f"{s.max_model_len:,}: such prompts are cut to fit the context")


def _check_env_trust(sc: Scenario, probs: _Problems) -> None:
    holders = [(("server",), sc.server.env, sc.server.extra_args)] + [(("modes", i), m.env, m.extra_args)
                                                                      for i, m in enumerate(sc.modes)]
    for path, env, args in holders:
        for k in env:
            if hijacks(k):
                probs.add(path + ("env", k), f"{k} changes which code the server runs: refused unless --allow-env "
                                             "(a scenario is data; see docs/FAULTS.md, trust model)")
            elif listens(k):
                probs.add(path + ("env", k), f"{k} changes where the server listens or is reached (kvtui keeps it "
                                             "on loopback): refused unless --allow-env (docs/FAULTS.md: trust model)")
        for j, a in enumerate(args):
            why = code_flag(a)
            if why:
                probs.add(path + ("extra_args",), f"argument {j + 1} {a.split('=', 1)[0]!r} {why}: refused unless "
                                                   "--allow-env (a scenario is data; see docs/FAULTS.md, trust model)")
