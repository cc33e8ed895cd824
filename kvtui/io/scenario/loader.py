"""Build a `Scenario` from TOML, naming the file, line and field of every problem.

    load_scenario("scenarios/h200.toml", overrides=["ramp.max=64"])

Every problem is collected (not just the first) and raised as one `ScenarioError`
(exit code 2). Unknown keys get the nearest valid key as a suggestion.
"""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kvtui.errors import ScenarioError
from kvtui.io.scenario.checks import (  # noqa: F401 - the loader's names for them
    _check,
    _check_env_trust,
    _check_quality,
)
from kvtui.io.scenario.convert import (  # noqa: F401
    _TOP_KEYS,
    _build,
    _convert,
    _dotted,
    _Problems,
    _slo,
    _suggest,
)
from kvtui.io.scenario.locate import LineIndex
from kvtui.io.scenario.schema import (
    RETIRED_PROTOCOLS,
    Cost,
    Mode,
    Quality,
    Ramp,
    Scenario,
    Server,
    Workload,
)


def parse_override(text: str) -> tuple[tuple, Any]:
    """`section.key=value` → (path, value); value parsed as TOML, else taken as a string."""
    if "=" not in text:
        raise ScenarioError([f"--set {text}: expected section.key=value"])
    key, raw = text.split("=", 1)
    path = tuple(p.strip() for p in key.strip().split("."))
    if not all(path):
        raise ScenarioError([f"--set {text}: empty key"])
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):  # nested past tomllib's depth: a plain string
        value = raw
    except ValueError:  # an integer past Python's 4,300 digits
        raise ScenarioError([f"--set {key.strip()}=…: a number of more than {sys.get_int_max_str_digits():,} "
                             "digits: no scenario value is that large"]) from None
    return path, value


def _apply_override(doc: dict, path: tuple, value: Any) -> None:
    node: Any = doc
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                raise ScenarioError([f"--set {_dotted(path)}: no list element {part!r}"])
            continue
        node = node.setdefault(part, {})
        if not isinstance(node, (dict, list)):
            raise ScenarioError([f"--set {_dotted(path)}: {_dotted(path[: i + 1])} is not a table"])
    if not isinstance(node, dict):
        raise ScenarioError([f"--set {_dotted(path)}: {_dotted(path[:-1])} is not a table"])
    node[path[-1]] = value


def scenario_from_dict(doc: dict, source: str = "<scenario>", index: LineIndex | None = None,
                       allow_env: bool = True) -> Scenario:
    probs = _Problems(source, index)
    for key in doc:
        if key not in _TOP_KEYS:
            probs.add((key,), "unknown key" + _suggest(key, _TOP_KEYS))
    sc = Scenario(source=source)
    for key, kind in (("name", str), ("description", str), ("seed", int)):
        if key in doc:
            v = _convert(doc[key], kind, (key,), probs)
            if v is not None:
                setattr(sc, key, v)
    if "server" in doc:
        sc.server = _build(Server, doc["server"], ("server",), probs) or Server()
    if "modes" in doc:
        raw = doc["modes"]
        if not isinstance(raw, list) or not raw:
            probs.add(("modes",), "must be a non-empty list of [[modes]] tables")
        else:
            modes = []
            for i, t in enumerate(raw):
                if isinstance(t, dict) and "name" not in t:
                    probs.add(("modes", i), "a mode needs a name")
                    continue
                m = _build(Mode, t, ("modes", i), probs)
                if m is not None:
                    modes.append(m)
            sc.modes = modes or sc.modes
    if "workload" in doc:
        sc.workload = _build(Workload, doc["workload"], ("workload",), probs) or Workload()
    if "ramp" in doc:
        sc.ramp = _build(Ramp, doc["ramp"], ("ramp",), probs) or Ramp()
    if "slo" in doc:
        sc.slo = _slo(doc["slo"], ("slo",), probs)
    if "cost" in doc:
        sc.cost = _build(Cost, doc["cost"], ("cost",), probs) or Cost()
    if "quality" in doc:
        sc.quality = _build(Quality, doc["quality"], ("quality",), probs) or Quality()
        _check_quality(sc, probs)
    if not probs.items:
        _check(sc, probs)
        if not allow_env:
            _check_env_trust(sc, probs)
    if probs.items:
        raise ScenarioError(probs.items)
    if sc.name == "scenario" and not source.startswith("<"):
        sc.name = Path(source).stem
    return sc


def load_scenario(path: str | Path | None, overrides: typing.Sequence[str] = (), allow_env: bool = False) -> Scenario:
    """Read, override (`--set`) and validate a scenario file; None gives the defaults.

    `allow_env`: let server.env / modes.env set variables that change which code the server
    runs (PYTHONPATH, LD_PRELOAD, … schema.hijacks); refused by default.
    """
    if path is None:
        doc: dict = {}
        text = ""
        source = "<defaults>"
    else:
        from kvtui.paths import find_scenario

        p = Path(path)
        source = str(path)
        if not p.exists():
            # a bare name (`h200-llama8b`) or a checkout-style `scenarios/NAME.toml`: the shipped or user file
            found = find_scenario(p)
            if found is not None:
                p, source = found, str(found)
        if not p.exists() and not p.is_symlink():
            raise ScenarioError([f"{source}: no such scenario file (`kvtui scenarios` lists the shipped and your own)"])
        from kvtui.errors import UsageError
        from kvtui.safeio import SCENARIO_CAP, read_bytes_file

        try:
            text = read_bytes_file(p, "scenario", SCENARIO_CAP).decode("utf-8")
        except UsageError as e:
            raise ScenarioError([str(e)])
        except UnicodeDecodeError as e:
            raise ScenarioError([f"{source}: cannot read: {e}"])
        try:
            doc = tomllib.loads(text)
        except RecursionError:
            raise ScenarioError([f"{source}: TOML nested too deeply to be a scenario"])
        except tomllib.TOMLDecodeError as e:  # before ValueError, of which it is a subclass
            m = re.search(r"at line (\d+)", str(e))
            line = m.group(1) if m else str(max(1, len(text.splitlines())))  # "at end of document": the last line
            raise ScenarioError([f"{source}:{line}: TOML syntax: {str(e).split(' (at')[0]}"])
        except ValueError:  # an integer past Python's 4,300 digits (not a TOMLDecodeError): one line
            raise ScenarioError([f"{source}:{_long_number_line(text)}: a number of more than "
                                 f"{sys.get_int_max_str_digits():,} digits: no scenario value is that large"])
    index = LineIndex(text)
    for item in overrides:
        opath, value = parse_override(item)
        _apply_override(doc, opath, value)
        index.set_by_override(opath, item)
    _refuse_huge_ints(doc, source, index)
    return scenario_from_dict(doc, source, index, allow_env=allow_env)


INT_BOUND = 2 ** 63  # past any scenario value (a count, bytes, seconds); 0x… hex and --set reach far past it


def _refuse_huge_ints(doc: Any, source: str, index: Any = None) -> None:
    """An integer no scenario value can be (a hex literal of 5,000 digits, say) is one line at its
    field and line, exit 2: further on it overflowed a float (a traceback) or failed to print."""
    found: list[tuple[tuple, int]] = []

    def walk(node: Any, path: tuple) -> None:
        if isinstance(node, bool):
            return
        if isinstance(node, int):
            if abs(node) >= INT_BOUND:
                found.append((path, node))
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + (i,))

    walk(doc, ())
    if found:
        path, value = found[0]
        where = ""
        if index is not None:
            over = index.override(path)
            short = over if over is None or len(over) <= 60 else over[:60] + "…"
            where = f": --set {short}:" if over else (f":{index.line(path)}:" if index.line(path) else ":")
        digits = max(1, int(value.bit_length() * 0.30103))
        dotted = ".".join(str(p) for p in path)
        raise ScenarioError([f"{source}{where} {dotted}: a whole number of about {digits:,} digits, past any "
                             f"scenario value (at most 2**63)"])


def _long_number_line(text: str) -> int:
    """The line of the first run of digits past Python's limit for int() (1 if none is found)."""
    m = re.search(r"\d{%d,}" % (sys.get_int_max_str_digits() + 1), text.replace("_", ""))
    if m is None:
        return 1
    # underscores were dropped for the search: count the lines up to the same run in the text
    head = text.replace("_", "")[: m.start()]
    return head.count("\n") + 1


def scenario_from_snapshot(d: dict, source: str = "<snapshot>", overrides: typing.Sequence[str] = ()) -> Scenario:
    """The scenario a snapshot was run with (its `scenario` key), back as a `Scenario`.

    Snapshots store the dataclasses as written (`slo.latency` nested, redacted secrets,
    `source`/`warnings`); this turns that back into the file form and validates it.
    """
    doc = {k: v for k, v in d.items() if k in _TOP_KEYS}
    slo = dict(doc.get("slo") or {})
    # None is "no target" in the dataclass; the file form has no way to say it but leaving the key out.
    doc["slo"] = {k: v for k, v in {**(slo.pop("latency", None) or {}), **slo}.items() if v is not None}
    server = dict(doc.get("server") or {})
    server.pop("api_key", None)  # "<redacted>": never a real key
    server["env"] = {k: v for k, v in (server.get("env") or {}).items() if v != "<redacted>"}
    doc["server"] = {k: v for k, v in server.items() if v is not None}
    ramp = doc.get("ramp")
    if isinstance(ramp, dict) and ramp.get("protocol") in RETIRED_PROTOCOLS:
        # Measured with a retired protocol (issue 46): what is run from it now (whatif, calibrate)
        # measures with today's, as from a snapshot written before ramp.protocol existed.
        doc["ramp"] = {k: v for k, v in ramp.items() if k != "protocol"}
    for text in overrides:  # `kvtui whatif SNAP --set …`: the same --set rules as on a file
        _apply_override(doc, *parse_override(text))
    _refuse_huge_ints(doc, source)
    return scenario_from_dict(doc, source)
