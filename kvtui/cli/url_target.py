"""`kvtui run --url http://HOST:PORT/v1 [--model NAME] [--api-key-env VAR]`: a server already running.

No scenario file needed: the scenario is built in memory from the defaults (or from a scenario
given beside --url, whose workload, ramp and SLO are kept) with the external engine pointed at
the URL (kvtui.runtime.engines.external) and one mode named after the served model: kvtui did not launch
the server, so it cannot switch its precision. Before anything runs the URL is read here:
/v1/models (the model, its max_model_len) and /metrics (what kvtui will and will not see).

Bad input is refused in one line, exit 2: not an http(s) URL, the key's environment variable
unset, nothing answering there, several models and none named. The key is read from the
environment variable named, sent as a bearer token, never stored nor printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from kvtui.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", metavar="URL",
                   help="measure a server that is already running (OpenAI-compatible, e.g. "
                        "http://127.0.0.1:8000/v1): no scenario file needed, one mode named after its model")
    p.add_argument("--model", dest="url_model", metavar="NAME",
                   help="with --url: the served model to load (needed when the server serves several)")
    p.add_argument("--api-key-env", metavar="VAR",
                   help="with --url: the environment variable holding the server's API key (never stored or printed)")


def check_no_url_options(args: argparse.Namespace) -> None:
    """--model and --api-key-env belong to --url: refused without it rather than silently ignored."""
    for attr, flag in (("url_model", "--model"), ("api_key_env", "--api-key-env")):
        if getattr(args, attr, None):
            raise UsageError(f"{flag} goes with --url (a running server); a scenario names its model in "
                             "server.model")


@dataclass
class Seen:
    """What the server showed before the run: its model, and what kvtui can and cannot see there."""

    model: str
    max_model_len: int | None
    mode: str
    can: list[str] = field(default_factory=list)
    cannot: list[str] = field(default_factory=list)


def mode_name(model: str) -> str:
    """A mode name (letters, digits, _ . + -, not starting with -) from a served model id."""
    tail = model.rstrip("/").rsplit("/", 1)[-1] or model
    name = re.sub(r"[^A-Za-z0-9_.+\-]+", "-", tail).lstrip("-")[:64].rstrip("-")
    return name or "server"


def _shown(url: str) -> str:
    from kvtui.runtime.engines.external import _split_userinfo

    return _split_userinfo(url)[0]


def check_url(url: str) -> tuple[str, str]:
    """(the base URL without /v1 and credentials, the Basic credentials or ""); UsageError if not http(s)."""
    from urllib.parse import urlsplit

    from kvtui.runtime.engines.external import _split_userinfo

    try:
        p = urlsplit(url)
        port_ok = p.port is None or 0 < p.port < 65536
    except ValueError:
        port_ok = False
        p = None
    if p is None or p.scheme not in ("http", "https") or not p.hostname or not port_ok:
        raise UsageError(f"--url {_shown(url)!r}: not an http(s) URL with a host "
                         "(e.g. --url http://127.0.0.1:8000/v1)")
    base, basic = _split_userinfo(url.rstrip("/"))
    if base.endswith("/v1"):
        base = base[:-3]
    return base, basic


def api_key(var: str | None) -> str:
    """The key in environment variable `var` ("" without --api-key-env); UsageError when unset or empty."""
    if not var:
        return ""
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", var):
        raise UsageError(f"--api-key-env {var!r}: not an environment variable name (give its name, not the key)")
    key = os.environ.get(var, "")
    if not key.strip():
        raise UsageError(f"--api-key-env {var}: that environment variable is not set (export {var}=… first); "
                         "the key is read from it, never from the command line")
    return key.strip()


def probe(base: str, basic: str, key: str, want: str | None, timeout_s: float = 10.0) -> Seen:
    """Read /v1/models and /metrics of the server at `base`; UsageError where it cannot be measured."""
    import httpx

    from kvtui.runtime.engines.base import served_models
    from kvtui.safeio import fetch

    headers = {"Authorization": f"Bearer {key}"} if key else ({"Authorization": f"Basic {basic}"} if basic else {})
    with httpx.Client(base_url=base, headers=headers, timeout=timeout_s, trust_env=False) as c:
        try:
            r = fetch(c, "GET", "/v1/models")  # bounded, untrusted (kvtui.safeio)
        except httpx.HTTPError as e:
            raise UsageError(f"--url {base}: cannot reach it ({type(e).__name__}): is the server running there?")
        if r.status_code in (401, 403):
            raise UsageError(f"--url {base}: the server wants an API key (HTTP {r.status_code})"
                             + (": the key in --api-key-env was refused" if key else
                                ": export it in a variable and name it with --api-key-env VAR"))
        if r.status_code != 200:
            raise UsageError(f"--url {base}/v1/models answered HTTP {r.status_code}: "
                             "is this an OpenAI-compatible server (vLLM, SGLang, TGI …)?")
        try:
            models = served_models(r.json(), base)
        except ValueError as e:
            raise UsageError(f"--url {base}/v1/models: not an OpenAI model list ({str(e)[:120]})")
        ids = [m["id"] for m in models]
        if not ids:
            raise UsageError(f"--url {base}: the server serves no model (/v1/models is empty)")
        if want:
            if want not in ids:
                raise UsageError(f"--model {want!r}: not served at {base}; it serves {_names(ids)}")
            model = want
        elif len(ids) > 1:
            raise UsageError(f"--url {base} serves {len(ids)} models ({_names(ids)}): name one with --model NAME")
        else:
            model = ids[0]
        mml = next((m.get("max_model_len") for m in models if m.get("id") == model), None)
        try:
            v = fetch(c, "GET", "/version")
            version = str(v.json().get("version") or "") if v.status_code == 200 else ""
        except (httpx.HTTPError, ValueError, AttributeError):
            version = ""
        try:
            mr = fetch(c, "GET", "/metrics")
            text = mr.text if mr.status_code == 200 else None
        except httpx.HTTPError:
            text = None
    seen = Seen(model=model, max_model_len=mml, mode=mode_name(model))
    if version.startswith("kvtui-sim"):
        seen.can.append(f"that it is kvtui's simulator ({version[:40]}): its figures are labelled SIMULATED")
    seen.can.append(f"the model {model!r}" + (f", max_model_len {mml}" if mml else "") + " (/v1/models)")
    seen.can.append("latency, throughput and errors from kvtui's own requests")
    seen.cannot.append("a precision switch: kvtui did not launch this server, so it measures one mode, "
                       f"{seen.mode!r}, as the server runs")
    from kvtui.runtime.engines.external import gpu_limits, metrics_limits

    m_can, m_cannot = metrics_limits(text)
    seen.can += m_can
    seen.cannot += m_cannot
    g_can, g_cannot = gpu_limits(base)
    seen.can += g_can
    seen.cannot += g_cannot
    return seen


def _names(ids: list[str]) -> str:
    shown = ", ".join(repr(i[:60]) for i in ids[:6])
    return shown + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")


def url_overrides(url: str, seen: Seen, with_scenario: bool) -> list[str]:
    """The --set values that point the scenario at the server (applied after the user's own)."""
    out = [f"server.engine={json.dumps('external')}", f"server.url={json.dumps(url)}",
           "server.replica_urls=[]", "server.replicas=1", "server.data_parallel_size=1",
           f"server.model={json.dumps(seen.model)}", f"server.served_model_name={json.dumps(seen.model)}",
           f"modes=[{{name = {json.dumps(seen.mode)}, model = {json.dumps(seen.model)}}}]"]
    if seen.max_model_len:
        out.append(f"server.max_model_len={int(seen.max_model_len)}")
    if not with_scenario:
        out.append(f"name={json.dumps('url-' + seen.mode)}")
    return out


def url_scenario(args: argparse.Namespace, overrides: list[str]) -> Any:
    """The scenario of `kvtui run --url …`, the server probed; prints what kvtui can and cannot see."""
    from kvtui.io.scenario import load_scenario

    url = args.url
    if getattr(args, "engine", None) not in (None, "external"):
        raise UsageError(f"--url measures a running server (the external engine): drop --engine {args.engine}")
    if getattr(args, "parallel", False):
        raise UsageError("--url measures one running server: --parallel launches one server per GPU")
    base, basic = check_url(url)
    key = api_key(getattr(args, "api_key_env", None))
    user = [o for o in overrides if not o.startswith("server.engine=")]
    if args.scenario:
        load_scenario(args.scenario, user, allow_env=getattr(args, "allow_env", False))  # its own errors first
    seen = probe(base, basic, key, getattr(args, "url_model", None))
    sc = load_scenario(args.scenario, user + url_overrides(url, seen, bool(args.scenario)),
                       allow_env=getattr(args, "allow_env", False))
    if key:
        sc.server.api_key = key  # in memory only: to_dict() redacts it from the snapshot
    if args.scenario:
        sc.warnings.append(f"--url: the scenario's server and modes are replaced by the server at {base} "
                           f"(one mode, {seen.mode!r}); its workload, ramp and SLO are kept")
    out = sys.stderr if getattr(args, "json", False) or not args.headless else sys.stdout
    print(f"kvtui: --url {base}: model {seen.model!r}, one mode {seen.mode!r} (engine external)", file=out)
    for line in seen.can:
        print(f"kvtui:   sees: {line}", file=out)
    for line in seen.cannot:
        print(f"kvtui:   cannot see: {line}", file=out)
    return sc
