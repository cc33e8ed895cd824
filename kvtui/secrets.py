"""Secrets never leave the process: one place that knows what a secret looks like and removes it.

Low in the tree (imports nothing of kvtui) so that the engines, the scenario schema, the load
generator and the report can all use it:
- `redact_scenario` / `redact_args`: the scenario and command lines as stored (api_key, secret
  env values, the value after --api-key / --hf-token / --token),
- `Redactor`: known secret strings (the per-run API key, secret env values) in free text —
  server logs, error bodies, SSE error events — before anything is printed or written,
- `scrub` / `scrub_text`: the second net on whole documents (exports, diffs, imports):
  secret-looking keys, bearer tokens, "api_key=…" pairs, URL passwords, and the values of
  secret-named variables of this process's own environment,
- `strip_url_password`: `http://user:pw@host` → `http://user:<redacted>@host` for anything shown.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

REDACTED = "<redacted>"
# Env names that are secret whatever the scenario says.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE)", re.I)


# A secret is recognised by what it is, not one spelling (issue 50): any word of a variable's or a
# flag's name (split at _ - .) that names a key, a token, a password or a credential, abbreviated
# or not: OPENAI_KEY, GITHUB_PAT, HF_AUTH, --hf_token, --hf-tok, --db-pass. Plurals of "token" are
# counts (--max-num-batched-tokens), not secrets.
SECRET_WORDS = frozenset({
    "token", "tok", "key", "apikey", "secret", "secrets", "auth", "authorization", "pat", "password", "passwd",
    "pass", "pwd", "passphrase", "credential", "credentials", "cred", "creds", "private", "privatekey", "bearer",
    "cookie", "session", "sessionid", "signature", "sig", "dsn", "webhook",
})
_WORD_SPLIT = re.compile(r"[_\-.\s]+")


def is_secret_name(name: str, words_only: bool = False) -> bool:
    """Does a variable's, flag's, field's or URL parameter's name say it holds a secret?
    `words_only`: by its words alone (a flag: --max-num-batched-tokens holds TOKEN but is a count)."""
    name = name.lstrip("-")
    if not words_only and _SECRET_NAME.search(name):
        return True
    words = [w for w in _WORD_SPLIT.split(name.lower()) if w]
    return any(w in SECRET_WORDS for w in words) or "apikey" in name.lower().replace("_", "").replace("-", "")


def is_secret_env(name: str, declared: list[str] | tuple[str, ...] = ()) -> bool:
    return name in declared or is_secret_name(name)


def redact_value(value: str) -> str:
    """A value that is no secret by its name, with the secrets it carries inside hidden: a URL's
    password and its secret query parameters (DATABASE_URL=postgres://u:pw@h/db, …?api_key=K)."""
    return strip_url_password(value) if isinstance(value, str) else value


def redact_env(env: dict[str, Any], declared: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """An environment as stored or shown: secret-named values hidden, secrets inside the others hidden."""
    return {k: (REDACTED if isinstance(k, str) and is_secret_env(k, declared) and v not in ("", None)
                else redact_value(v)) for k, v in env.items()}


def redact_scenario(d: dict[str, Any]) -> dict[str, Any]:
    """The scenario as stored: api_key, secret env values, secret flags and URL passwords hidden.

    Any shape is accepted (a snapshot from a file may hold anything): what is not a table is
    left to the generic scrub.
    """
    d = copy.deepcopy(d)
    server = d.get("server")
    server = server if isinstance(server, dict) else {}
    declared = server.get("secret_env")
    declared = [x for x in declared if isinstance(x, str)] if isinstance(declared, list) else []
    if server.get("api_key"):
        server["api_key"] = REDACTED
    for key in ("url", "metrics_url"):
        if isinstance(server.get(key), str):
            server[key] = strip_url_password(server[key])
    for key in ("replica_urls", "metrics_urls"):
        if isinstance(server.get(key), list):
            server[key] = [strip_url_password(u) if isinstance(u, str) else u for u in server[key]]
    modes = d.get("modes")
    for holder in [server] + (list(modes) if isinstance(modes, list) else []):
        if not isinstance(holder, dict):
            continue
        env = holder.get("env")
        if isinstance(env, dict):
            holder["env"] = redact_env(env, declared)
        args = holder.get("extra_args")
        if isinstance(args, list) and all(isinstance(a, str) for a in args):
            holder["extra_args"] = redact_args(args)
    return d


def _secret_flag(arg: str) -> bool:
    return arg.startswith("-") and len(arg.lstrip("-")) > 0 and is_secret_name(arg.split("=", 1)[0], words_only=True)


def redact_args(args: list[str]) -> list[str]:
    """Hide the value of every secret-named flag (`--api-key K`, `--hf_token=K`, `--hf-tok K`, …) in a
    command line, and the secrets inside any URL argument (its password, its secret query values)."""
    out: list[str] = []
    hide_next = False
    setting = False
    for a in args:
        if setting:  # the word after --set: KEY=VALUE
            setting = False
            out.append(redact_setting(a))
            continue
        if a == "--set":
            out.append(a)
            setting = True
            continue
        if hide_next:
            hide_next = False
            if not a.startswith("--"):
                out.append(REDACTED)
                continue
        if a.startswith("-") and "=" in a and _secret_flag(a):
            out.append(a.split("=", 1)[0] + "=" + REDACTED)
        elif _secret_flag(a):
            out.append(a)
            hide_next = True
        elif a.startswith("-") and "=" in a:
            k, v = a.split("=", 1)
            out.append(k + "=" + redact_setting(v))
        else:
            out.append(redact_value(a))
    return out


def redact_setting(text: str) -> str:
    """`--set KEY=VALUE` as shown (a resume hint, a stored command): a secret-named KEY's value hidden
    (server.api_key=K, server.env.OPENAI_KEY=K), secrets inside any other value hidden."""
    if "=" in text:
        k, v = text.split("=", 1)
        last = k.strip().rsplit(".", 1)[-1]
        if is_secret_name(last) or last in ("env",) and is_secret_name(v.split("=", 1)[0]):
            return k + "=" + REDACTED
        if v.strip().startswith("["):  # a list of arguments (server.extra_args=[…])
            import json

            try:
                items = json.loads(v)
            except ValueError:
                items = None
            if isinstance(items, list) and all(isinstance(x, str) for x in items):
                return k + "=" + json.dumps(redact_args(items))
        return k + "=" + redact_value(scrub_text(v, []))
    return redact_value(text)


class Redactor:
    """Replaces known secret strings in free text (server logs, error messages)."""

    def __init__(self, secrets: list[str] | None = None):
        self.secrets = [s for s in (secrets or []) if s and len(s) >= 4]

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= 4 and secret not in self.secrets:
            self.secrets.append(secret)

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            if s in text:
                text = text.replace(s, REDACTED)
        return text


_SECRET_KEY = re.compile(r"^(?:.*[_-])?"
                         r"(?:api_?key|apikey|token|secret|secrets|password|passwd|credentials?|authorization|auth)$",
                         re.I)
_TEXT_PATTERNS = (
    re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/=-]{6,})"),
    re.compile(r"(?i)((?:api[_-]?key|apikey|hf[_-]?token|access[_-]?token|auth[_-]?token|secret|password|passwd)"
               r"[\"']?\s*[:=]\s*[\"']?)"
               r"(?!<redacted>)([^\s\"',;&]{4,})"),
    re.compile(r"(?i)(--(?:api-key|hf-token|token)(?:=|\s+))(?!<redacted>)(\S+)"),
    # any flag with a secret word in its name (--hf_token, --hf-tok, --db-password, --openai-key)
    re.compile(r"(?i)(--(?:[a-z0-9]+[-_])*(?:api[-_]?key|apikey|key|token|tok|secret|auth|pat|password|passwd|pass|"
               r"pwd|credentials?|creds?)(?:=|\s+))(?!<redacted>)(?!--)(\S+)"),
    # a URL's secret query parameter (?api_key=K, &access_token=K, &sig=K)
    re.compile(r"(?i)([?&;](?:[a-z0-9]+[-_])*(?:api[-_]?key|apikey|key|token|secret|auth|pat|password|passwd|pass|"
               r"pwd|credentials?|sig|signature|session)=)(?!<redacted>)([^&#\s\"']+)"),
    re.compile(r"(://[^/\s:@]*:)([^@\s/]+)(@)"),
)
_ARG_KEYS = ("extra_args", "command", "argv", "cmd")


def process_secrets() -> list[str]:
    """Values of this process's secret-named environment variables (never written anywhere)."""
    return sorted({v for k, v in os.environ.items() if _SECRET_NAME.search(k) and v and len(v) >= 8},
                  key=len, reverse=True)


def scrub_text(text: str, secrets: list[str] | None = None) -> str:
    for s in secrets if secrets is not None else process_secrets():
        if s in text:
            text = text.replace(s, REDACTED)
    for pat in _TEXT_PATTERNS:
        if pat.groups == 3:
            text = pat.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
        else:
            text = pat.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def _scrub(x: Any, declared: list[str], secrets: list[str], key: str = "") -> Any:
    if isinstance(x, dict):
        out: dict[Any, Any] = {}
        for k, v in x.items():
            if k == "env" and isinstance(v, dict):
                out[k] = {ek: (REDACTED if isinstance(ek, str) and is_secret_env(ek, declared) and ev not in ("", None)
                               else _scrub(redact_value(ev), declared, secrets, ek))
                          for ek, ev in v.items()}
            elif isinstance(v, str) and v and v != REDACTED and _SECRET_KEY.match(str(k)):
                out[k] = REDACTED
            else:
                out[k] = _scrub(v, declared, secrets, str(k))
        return out
    if isinstance(x, list):
        if key in _ARG_KEYS and all(isinstance(a, str) for a in x):
            x = redact_args(x)
        return [_scrub(v, declared, secrets, key) for v in x]
    if isinstance(x, str):
        return scrub_text(x, secrets)
    return x


def scrub(doc: dict[str, Any], extra_secrets: list[str] | None = None) -> dict[str, Any]:
    """A copy of `doc` with every secret this module can recognise replaced by <redacted>."""
    d = copy.deepcopy(doc)
    if isinstance(d.get("scenario"), dict):
        d["scenario"] = redact_scenario(d["scenario"])
    sc: dict[str, Any] = d["scenario"] if isinstance(d.get("scenario"), dict) else {}
    server: dict[str, Any] = sc["server"] if isinstance(sc.get("server"), dict) else {}
    declared = ([x for x in server.get("secret_env") or [] if isinstance(x, str)]
                if isinstance(server.get("secret_env"), list) else [])
    secrets = sorted(set(process_secrets()) | {s for s in (extra_secrets or []) if s and len(s) >= 4},
                     key=len, reverse=True)
    for name in declared:
        v = os.environ.get(name)
        if v and len(v) >= 4 and v not in secrets:
            secrets.append(v)
    return _scrub(d, declared, secrets)


def strip_url_password(url: str) -> str:
    """The URL with its password (if any) and its secret query values replaced:
    `http://u:pw@h/` → `http://u:<redacted>@h/`, `…/v1?api_key=K` → `…/v1?api_key=<redacted>`."""
    url = _TEXT_PATTERNS[-2].sub(lambda m: m.group(1) + REDACTED, url)
    return _TEXT_PATTERNS[-1].sub(lambda m: m.group(1) + REDACTED + m.group(3), url)


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port: a key for the server at `b` may be sent to `a`."""
    from urllib.parse import urlsplit

    def origin(u: str) -> tuple[str, str, int | None]:
        p = urlsplit(u)
        try:
            port = p.port or {"http": 80, "https": 443}.get(p.scheme)
        except ValueError:
            port = -1
        return p.scheme.lower(), (p.hostname or "").lower(), port

    return origin(a) == origin(b)
