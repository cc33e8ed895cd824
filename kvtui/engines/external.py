"""Engine `external`: an OpenAI-compatible server someone else started (URL, optional /metrics and key).

kvtui starts and stops nothing here, so every mode of the scenario measures the same
server: the mode names are labels only (the run says so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from kvtui.engines.base import EngineInfo, Endpoint, LogSink, StartupFacts
from kvtui.engines.registry import register
from kvtui.errors import EngineError
from kvtui.scenario.schema import Mode, Scenario


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


@register("external")
class ExternalEngine:
    name = "external"
    simulated = False
    time_scale = 1.0

    def __init__(self) -> None:
        self._facts = StartupFacts()
        self._info = EngineInfo(engine="external", simulated=False)
        self._endpoint: Endpoint | None = None
        self._client: httpx.Client | None = None

    def start(self, scenario: Scenario, mode: Mode, on_log: LogSink) -> Endpoint:
        s = scenario.server
        base, basic = _split_userinfo(s.url.rstrip("/"))  # user:pw@ never stored, printed or logged
        if base.endswith("/v1"):
            base = base[:-3]
        key = s.api_key or None
        headers = {"Authorization": f"Bearer {key}"} if key else ({"Authorization": f"Basic {basic}"} if basic else {})
        self._client = httpx.Client(base_url=base, headers=headers, timeout=10.0, trust_env=False)
        t0 = time.monotonic()
        on_log(f"kvtui: using the external server at {base} (mode {mode.name!r} is a label only)")
        try:
            r = self._client.get("/v1/models")
        except httpx.HTTPError as e:
            raise EngineError("connect", f"cannot reach {base}: {type(e).__name__}: {e}")
        if r.status_code == 401:
            raise EngineError("auth", f"{base} refused the API key (HTTP 401); set server.api_key")
        if r.status_code != 200:
            raise EngineError("connect", f"{base}/v1/models answered HTTP {r.status_code}")
        try:
            payload = r.json()
        except ValueError:
            raise EngineError("connect", f"{base}/v1/models did not answer JSON: is this an OpenAI-compatible server?")
        from kvtui.engines.base import served_models

        try:
            models = served_models(payload, base)
        except ValueError as e:
            raise EngineError("connect", str(e))
        want = mode.model or s.served_model_name or s.model
        ids = [m.get("id") for m in models]
        if want and want in ids:
            model = want
        elif ids:
            model = ids[0]
            if want and want != "llama-3.1-8b":
                on_log(f"kvtui: model {want!r} is not served there; using {model!r}")
        else:
            raise EngineError("bad_model", f"{base} serves no model")
        max_len = next((m.get("max_model_len") for m in models if m.get("id") == model), None)
        try:
            v = self._client.get("/version")
            self._info.version = v.json().get("version") if v.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            self._info.version = None
        metrics = s.metrics_url or f"{base}/metrics"
        self._facts = StartupFacts(startup_s=time.monotonic() - t0)
        self._endpoint = _Endpoint(base_url=base, model=model, api_key=key, metrics_url=metrics, max_model_len=max_len,
                                   basic=basic)
        return self._endpoint

    def facts(self) -> StartupFacts:
        return self._facts

    def info(self) -> EngineInfo:
        return self._info

    def check_alive(self) -> str | None:
        if self._client is None:
            return "not started"
        try:
            r = self._client.get("/health", timeout=5.0)
        except httpx.HTTPError as e:
            return f"external server unreachable: {type(e).__name__}"
        if r.status_code >= 500:
            return f"external server unhealthy: /health answered HTTP {r.status_code}"
        return None

    def pids(self) -> set[int]:
        return set()  # not our process: NVML reads the whole GPU

    def gpu_memory(self) -> dict[str, Any] | None:
        return None

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
