"""Engine `external`: an OpenAI-compatible server someone else started (URL, optional /metrics and key).

kvtui starts and stops nothing here, so every mode of the scenario measures the same
server: the mode names are labels only (the run says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from kvtui import clock
from kvtui.errors import EngineError
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.runtime.engines.base import Endpoint, EngineInfo, LogSink, Replica, StartupFacts
from kvtui.runtime.engines.registry import register
from kvtui.safeio import fetch, http_client, total_deadline


def _split_userinfo(url: str) -> tuple[str, str]:
    """(the URL without user:password@, the base64 Basic credentials or "")."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    p = urlsplit(url)
    if p.username is None and p.password is None:
        return url, ""
    netloc = p.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    try:
        if p.port:
            netloc += f":{p.port}"
    except ValueError:
        pass
    cred = f"{unquote(p.username or '')}:{unquote(p.password or '')}"
    return urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment)), base64.b64encode(cred.encode()).decode()


@dataclass
class _Endpoint(Endpoint):
    """The endpoint, with Basic credentials from the URL sent as a header (never part of base_url)."""

    basic: str = field(default="", repr=False)

    def headers(self) -> dict[str, str]:
        h = super().headers()
        if self.basic and "Authorization" not in h:
            h["Authorization"] = f"Basic {self.basic}"
        return h


def metrics_limits(text: str | None) -> tuple[list[str], list[str]]:
    """What the server's /metrics lets kvtui see, and what it does not (the families kvtui reads)."""
    if text is None:
        return [], ["no /metrics answered: no KV cache usage, queue or preemptions; "
                    "latency and throughput from kvtui's own requests only"]
    from kvtui.runtime.telemetry.prom import _COUNTERS, _GAUGES

    families = {**_GAUGES, **_COUNTERS}

    def has(key: str) -> bool:
        return any(re.search(rf"^{re.escape(n)}(_total)?[{{ ]", text, re.M) for n in families[key])

    can: list[str] = []
    cannot: list[str] = []
    for key, what in (("kv_usage", "KV cache usage"), ("running", "running requests"),
                      ("waiting", "waiting requests"), ("preemptions", "preemptions")):
        (can if has(key) else cannot).append(what)
    kv_size = "vllm:cache_config_info" in text
    out_can = [f"/metrics: {', '.join(can)}" + (" and the KV cache's size" if kv_size else "")] if can else []
    out_cannot = []
    if cannot:
        out_cannot.append(f"/metrics has no {', '.join(cannot)}" + (": not a vLLM server?" if not can else ""))
    if not kv_size:
        out_cannot.append("no KV cache size (no vllm:cache_config_info on /metrics): the search starts without "
                          "a KV-bound guess")
    return out_can, out_cannot


def _local(host: str) -> bool:
    import ipaddress
    import socket

    if host in ("localhost", socket.gethostname()):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def gpu_limits(base: str) -> tuple[list[str], list[str]]:
    """GPU telemetry: only where NVML on this host sees the server's GPU."""
    from urllib.parse import urlsplit

    from kvtui.runtime.telemetry.gpus import gpu_inventory

    inv = gpu_inventory()
    host = urlsplit(base).hostname or ""
    if not inv.available:
        return [], [f"{inv.reason or 'no GPU telemetry: NVML sees no GPU'} on this host: no GPU power, memory "
                    "or utilisation figures"]
    names = ", ".join(sorted({g["name"] for g in inv.gpus}))
    if _local(host):
        return [f"GPU telemetry from this host's NVML ({len(inv.gpus)} × {names}): the whole GPU, "
                "not only the server's processes"], []
    return [], [f"GPU telemetry is this host's ({len(inv.gpus)} × {names}), not the server's: {host} is "
                "another host"]


ANSWER_S = 15.0  # a probe's whole answer (/v1/models, /version): headers and body, however trickled
HEALTH_S = 5.0  # one /health's whole answer, in a run
VERSION_S = 5.0  # /version's whole answer: a label, never worth holding the start


@register("external")
class ExternalEngine:
    name = "external"
    simulated = False
    time_scale = 1.0

    def __init__(self) -> None:
        self._facts = StartupFacts()
        self._info = EngineInfo(engine="external", simulated=False)
        self._endpoint: Endpoint | None = None
        self._metrics_text: str | None = None
        self._client: httpx.Client | None = None
        self._clients: list[httpx.Client] = []

    def start(self, scenario: Scenario, mode: Mode, on_log: LogSink) -> Endpoint:
        s = scenario.server
        urls = list(s.replica_urls) or [s.url]
        key = s.api_key or None
        t0 = clock.monotonic()
        bases: list[tuple[str, str, dict[str, str]]] = []
        for u in urls:
            base, basic = _split_userinfo(u.rstrip("/"))  # user:pw@ never stored, printed or logged
            if base.endswith("/v1"):
                base = base[:-3]
            auth = f"Bearer {key}" if key else (f"Basic {basic}" if basic else "")
            headers = {"Authorization": auth} if auth else {}
            bases.append((base, basic, headers))
        where = bases[0][0] if len(bases) == 1 else f"{len(bases)} replicas ({', '.join(b for b, _, _ in bases)})"
        on_log(f"kvtui: using the external server at {where} (mode {mode.name!r} is a label only)")
        self._clients = [http_client(base_url=b, headers=h, timeout=10.0) for b, _, h in bases]
        self._client = self._clients[0]
        # The whole start (every probe, /version, the KV facts from /metrics) within
        # server.startup_timeout_s: a server trickling its answers cannot hold it (kvtui.safeio).
        limit = float(s.startup_timeout_s or 900.0)
        try:
            with total_deadline(limit):
                return self._start(s, mode, bases, key, t0, on_log)
        except httpx.TimeoutException as e:
            raise EngineError("timeout", f"{bases[0][0]} did not answer in full in time (a probe has {ANSWER_S:g} s, "
                              f"the whole start server.startup_timeout_s = {limit:g} s): {e}") from None

    def _start(self, s: Any, mode: Mode, bases: list[tuple[str, str, dict[str, str]]], key: str | None, t0: float,
               on_log: LogSink) -> Endpoint:
        want = mode.model or s.served_model_name or s.model
        model, max_len = "", None
        for i, (base, _, _) in enumerate(bases):
            name = f"replica r{i} " if len(bases) > 1 else ""
            m, ml = self._probe(self._clients[i], base, want, on_log if i == 0 else None, name)
            if i == 0:
                model, max_len = m, ml
            elif m != model:
                raise EngineError("bad_model", f"{name}{base} serves {m!r}, replica r0 serves {model!r}: "
                                  "the replicas must serve the same model")
            elif ml is not None:
                max_len = ml if max_len is None else min(max_len, ml)
        try:
            assert self._client is not None
            v = fetch(self._client, "GET", "/version", total_s=VERSION_S)  # bounded, untrusted (kvtui.safeio)
            got = v.field("version") if v.status_code == 200 else None
            self._info.version = str(got)[:80] if got is not None else None
        except httpx.TimeoutException:  # a version is a label: not worth the start
            self._info.version = None
            on_log(f"kvtui: {bases[0][0]}/version did not answer in full within {VERSION_S:g} s: version unknown")
        except (httpx.HTTPError, ValueError):
            self._info.version = None
        # `kvtui sim serve` behind the URL: its figures are the simulator's, labelled SIMULATED as such.
        self._info.simulated = (self._info.version or "").startswith("kvtui-sim")
        base, basic, headers = bases[0]
        metrics = s.metrics_url or (s.metrics_urls[0] if s.metrics_urls and not s.replica_urls else f"{base}/metrics")
        self._facts = StartupFacts(startup_s=clock.monotonic() - t0)
        self._endpoint = _Endpoint(base_url=base, model=model, api_key=key, metrics_url=metrics, max_model_len=max_len,
                                   basic=basic, routing=s.routing)
        if s.replica_urls:
            mus = list(s.metrics_urls) or [f"{b}/metrics" for b, _, _ in bases]
            self._endpoint.replicas = [Replica(f"r{i}", b, mu, h) for i, ((b, _, h), mu) in enumerate(zip(bases, mus))]
        elif len(s.metrics_urls) > 1:
            # A gateway (llm-d, KServe, a vLLM DP head): the requests go to `url`, the /metrics of
            # what stands behind it are read one by one; each gets the key only on the URL's origin.
            self._endpoint.replicas = [Replica(f"r{i}", "", mu, headers) for i, mu in enumerate(s.metrics_urls)]
        self._metrics_text = None
        self._facts.merge(self._kv_facts())
        self._facts.warnings += self.limits(mode, bases[0][0])
        return self._endpoint

    def limits(self, mode: Mode, base: str) -> list[str]:
        """What this run cannot see of a server kvtui did not start, as the mode's warnings (so the
        snapshot, the exports and every answer's caveats carry them)."""
        out = [f"external server: kvtui did not launch it, so no precision switch: mode {mode.name!r} is a "
               "label for the server as it runs"]
        if self._info.simulated:
            out.insert(0, f"SIMULATED: the server at {base} is kvtui's simulator ({self._info.version}), not a GPU")
        out += metrics_limits(self._metrics_text)[1]
        out += gpu_limits(base)[1]
        return out

    def _kv_facts(self) -> StartupFacts:
        """The KV caches as the servers state them on /metrics (`vllm:cache_config_info`), since kvtui
        did not start them and has no log: one server's figures, summed over the data-parallel
        engines it labels and over the replicas behind the run (each holds its own KV cache).
        Empty where no /metrics answers with vLLM's gauge (another server, the simulator's own)."""
        from kvtui.runtime.engines.replicas import summed_facts
        from kvtui.runtime.engines.vllm.cache_facts import engines_in_metrics, facts_from_metrics_text
        from kvtui.runtime.telemetry.prom import MetricsScraper
        from kvtui.secrets import same_origin

        ep = self._endpoint
        assert ep is not None
        targets = [(r.metrics_url, r.headers, r.base_url or ep.base_url) for r in ep.replicas if r.metrics_url]
        if not targets and ep.metrics_url:
            targets = [(ep.metrics_url, ep.headers(), ep.base_url)]
        parts: list[StartupFacts] = []
        for url, headers, origin in targets:
            # The key goes to its own origin only, as for the scrapes; a partial sum would understate
            # the KV, so any replica that does not say gives no figures rather than wrong ones.
            with MetricsScraper(url, headers=headers if same_origin(url, origin) else {}, timeout_s=5.0) as scraper:
                text, _ = scraper.fetch_text()  # the scrapes' own capped GET (16 MiB, the timeout)
            if not parts:
                self._metrics_text = text
            f = facts_from_metrics_text(text) if text is not None else None
            if f is None:
                return StartupFacts()
            parts.append(f.summed_over_engines(engines_in_metrics(text or "")))
        return summed_facts(parts, "as each replica's /metrics states it") if parts else StartupFacts()

    def _probe(self, client: httpx.Client, base: str, want: str, on_log: LogSink | None,
               name: str = "") -> tuple[str, int | None]:
        """(the model to use, its max_model_len) from one server's /v1/models; EngineError when unusable."""
        try:
            r = fetch(client, "GET", "/v1/models", total_s=ANSWER_S)  # bounded, untrusted (kvtui.safeio)
        except httpx.HTTPError as e:
            if isinstance(e, httpx.TimeoutException) and not isinstance(e, httpx.ConnectTimeout):
                raise  # the answer did not come in full in time: start() names the deadline
            raise EngineError("connect", f"cannot reach {name}{base}: {type(e).__name__}: {e}")
        if r.status_code == 401:
            raise EngineError("auth", f"{name}{base} refused the API key (HTTP 401); set server.api_key")
        if r.status_code != 200:
            raise EngineError("connect", f"{name}{base}/v1/models answered HTTP {r.status_code}")
        try:
            payload = r.json()
        except ValueError:
            raise EngineError("connect",
                              f"{name}{base}/v1/models did not answer JSON: is this an OpenAI-compatible server?")
        from kvtui.runtime.engines.base import served_models

        try:
            models = served_models(payload, base)
        except ValueError as e:
            raise EngineError("connect", str(e))
        ids: list[str] = [m["id"] for m in models]  # served_models checked each has a string id
        if want and want in ids:
            model = want
        elif ids:
            model = ids[0]
            if want and want != "llama-3.1-8b" and on_log is not None:
                on_log(f"kvtui: model {want!r} is not served there; using {model!r}")
        else:
            raise EngineError("bad_model", f"{name}{base} serves no model")
        return model, next((m.get("max_model_len") for m in models if m.get("id") == model), None)

    def facts(self) -> StartupFacts:
        return self._facts

    def info(self) -> EngineInfo:
        return self._info

    def check_alive(self) -> str | None:
        """None while one replica at least answers /health: the run goes on with those (the
        telemetry names a replica that is down); the reasons of all when none does."""
        if not self._clients:
            return "not started"
        why = []
        for i, c in enumerate(self._clients):
            name = f"replica r{i} " if len(self._clients) > 1 else ""
            try:
                r = fetch(c, "GET", "/health", total_s=HEALTH_S, timeout=HEALTH_S)  # the whole answer in 5 s
            except httpx.TimeoutException as e:
                why.append(f"{name}external server: /health not answered in full within {HEALTH_S:g} s ({e})")
                continue
            except httpx.HTTPError as e:
                why.append(f"{name}external server unreachable: {type(e).__name__}")
                continue
            if r.status_code >= 500:
                why.append(f"{name}external server unhealthy: /health answered HTTP {r.status_code}")
                continue
            return None
        return "; ".join(why)

    def pids(self) -> set[int]:
        return set()  # not our process: NVML reads the whole GPU

    def gpu_memory(self) -> dict[str, Any] | None:
        return None

    def stop(self) -> None:
        for c in self._clients:
            c.close()
        self._clients = []
        self._client = None
