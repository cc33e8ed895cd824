"""Secrets never leave the process: API keys and secret env values are removed before any write."""

from __future__ import annotations

import copy
import re
from typing import Any

REDACTED = "<redacted>"
# Env names that are secret whatever the scenario says.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE)", re.I)


def is_secret_env(name: str, declared: list[str] | tuple[str, ...] = ()) -> bool:
    return name in declared or bool(_SECRET_NAME.search(name))


def redact_scenario(d: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(d)
    server = d.get("server", {})
    declared = server.get("secret_env", [])
    if server.get("api_key"):
        server["api_key"] = REDACTED
    for holder in [server] + list(d.get("modes", [])):
        env = holder.get("env") or {}
        for k in env:
            if is_secret_env(k, declared):
                env[k] = REDACTED
        holder["extra_args"] = redact_args(holder.get("extra_args") or [])
    return d


def redact_args(args: list[str]) -> list[str]:
    """Hide the value following --api-key (or --api-key=...) in a command line."""
    out: list[str] = []
    hide_next = False
    for a in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif a in ("--api-key", "--hf-token", "--token"):
            out.append(a)
            hide_next = True
        elif a.startswith(("--api-key=", "--hf-token=", "--token=")):
            out.append(a.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(a)
    return out


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
