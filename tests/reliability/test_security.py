"""Security: loopback servers, a random API key per server that the client uses and no one else
sees, no shell, scenario files that cannot run code, secrets out of logs and files, private files.

The run-level checks read the real process table and socket table (/proc) of a real headless
run against the simulator.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import httpx
import pytest

from kvtui.io.snapshot.file import load_snapshot

from reliability_helpers import cmdline, headless, journal_steps, tagged, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that process `pid` holds."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return []
    out = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] != "0A" or f[9] not in inodes:  # 0A: LISTEN
                continue
            hexaddr, hexport = f[1].split(":")
            if v6:
                raw = bytes.fromhex(hexaddr)
                words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                import ipaddress

                addr = str(ipaddress.IPv6Address(b"".join(words)))
            else:
                addr = ".".join(str(b) for b in bytes.fromhex(hexaddr)[::-1])
            out.append((addr, int(hexport, 16)))
    return out


def _servers(tag: str) -> list[int]:
    return [pid for pid, cmd in tagged(tag) if " sim serve " in f" {cmd} "]


def _key_of(pid: int) -> str:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    keys = [e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"KVTUI_SIM_API_KEY=")]
    assert len(keys) == 1, "the simulator gets its key through its environment"
    return keys[0]


def test_servers_on_loopback_with_a_private_random_key_the_client_uses(tmp_path, knee_path, runs):
    h = headless(tmp_path, knee_path, "-v", "--set", "ramp.max=2")  # -v: the servers' own logs are printed too
    runs.append(h)
    seen: dict[str, dict] = {}

    def look() -> bool:
        for pid in _servers(h.tag):
            cmd = cmdline(pid)
            mode = cmd.split("--mode ")[1].split()[0]
            if mode in seen:
                continue
            listen = _listening(pid)
            if not listen:
                continue  # not bound yet
            seen[mode] = {"pid": pid, "cmd": cmd, "listen": listen, "key": _key_of(pid),
                          "environ_mode": stat.S_IMODE(os.stat(f"/proc/{pid}/environ").st_mode)}
            port = listen[0][1]
            base = f"http://127.0.0.1:{port}"
            # The server refuses anyone without the key; the key opens it.
            seen[mode]["anon"] = httpx.get(base + "/v1/models", timeout=5, trust_env=False).status_code
            seen[mode]["keyed"] = httpx.get(base + "/v1/models", timeout=5, trust_env=False,
                                            headers={"Authorization": f"Bearer {seen[mode]['key']}"}).status_code
        return len(seen) == 2 or h.proc.poll() is not None

    wait_until(look, 240, "both modes' servers seen", poll_s=0.1)
    rc = h.wait()
    assert rc == 0, h.stderr()
    assert set(seen) == {"first", "second"}
    for mode, s in seen.items():
        assert all(addr == "127.0.0.1" for addr, _ in s["listen"]), s["listen"]
        assert s["anon"] == 401 and s["keyed"] == 200
        key = s["key"]
        assert len(key) >= 24 and key not in s["cmd"]  # not in the command line `ps` shows every user
        assert s["environ_mode"] == 0o400  # where the key is: readable by its owner only
    assert seen["first"]["key"] != seen["second"]["key"]  # one key per server
    # The client used it: every window request succeeded.
    doc = load_snapshot(h.out)
    assert all(s["errors"] == 0 and s["requests"] > 0 for m in doc["modes"] for s in m["steps"])
    # And it is nowhere in what kvtui printed (the servers' logs included) or wrote.
    texts = {"stdout": h.stdout(), "stderr": h.stderr(), "snapshot": h.out.read_text(), "records": h.records.read_text()}
    assert "| " in texts["stdout"]  # -v printed server log lines
    for what, text in texts.items():
        for s in seen.values():
            assert s["key"] not in text, f"API key in {what}"
    for p in (h.out, h.records):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600


def test_a_non_loopback_host_is_a_warning_and_is_what_the_server_binds(tmp_path, knee_path, runs):
    h = headless(tmp_path, knee_path, "--set", 'server.host="0.0.0.0"', "--set", "ramp.max=1", "--mode", "first")
    runs.append(h)
    binds: list = []

    def look() -> bool:
        for pid in _servers(h.tag):
            binds.extend(_listening(pid))
        return bool(binds) or h.proc.poll() is not None

    wait_until(look, 120, "the server listening", poll_s=0.1)
    h.wait()
    assert "kvtui: warning: server.host = '0.0.0.0' is not loopback: the server will be reachable from the network" in h.stderr()
    assert binds and all(addr == "0.0.0.0" for addr, _ in binds)


def test_files_are_private_even_with_a_permissive_umask(tmp_path, knee_path, runs):
    h = headless(tmp_path, knee_path, "--set", "ramp.max=2", "--mode", "first", umask=0)
    runs.append(h)
    wait_until(lambda: journal_steps(h.journal), 120, "a step journaled", h.proc)
    modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in (h.journal, h.records)}  # while the run goes
    assert h.wait() == 0, h.stderr()
    modes[h.out.name] = stat.S_IMODE(os.stat(h.out).st_mode)
    assert modes == {"run.json.journal": 0o600, "run.records.jsonl": 0o600, "run.json": 0o600}
    # The umask really was 0: a file kvtui does not protect comes out world-writable.
    import subprocess
    import sys

    probe = tmp_path / "probe"
    subprocess.run([sys.executable, "-c", f"open({str(probe)!r}, 'w').close()"], preexec_fn=lambda: os.umask(0), check=True)
    assert stat.S_IMODE(os.stat(probe).st_mode) == 0o666


def test_no_shell_and_no_code_from_data_anywhere_in_kvtui():
    """Every subprocess gets an argv list: no shell=True, os.system, os.popen; no eval/exec/pickle of data."""
    bad = []
    for path in sorted((ROOT / "kvtui").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
                owner = fn.value.id if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) else ""
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                        bad.append(f"{path}:{node.lineno}: shell=")
                if (owner, name) in (("os", "system"), ("os", "popen"), ("pickle", "loads"), ("pickle", "load"),
                                     ("yaml", "load"), ("marshal", "loads")):
                    bad.append(f"{path}:{node.lineno}: {owner}.{name}")
                if isinstance(fn, ast.Name) and fn.id in ("eval", "exec", "compile", "__import__"):
                    if not (fn.id == "__import__" and all(isinstance(a, ast.Constant) for a in node.args)):
                        bad.append(f"{path}:{node.lineno}: {fn.id}()")
    assert bad == []


INJECT = """
name = "inject $(touch {marker}) `touch {marker}`"
description = "__import__('os').system('touch {marker}')"
[server]
engine = "sim"
max_model_len = 2048
time_scale = 1
served_model_name = "knee; touch {marker}"
extra_args = ["--knee", "6", "--knee-tpot-ms", "20"]
[server.env]
SHELL_TRAP = "$(touch {marker})"
PYTHONSTARTUP = "{startup}"
[[modes]]
name = "m"
extra_args = ["--seed", "1;touch", "{marker}"]
[workload]
prompt_tokens = 16
output_tokens = 4
[ramp]
start = 1
max = 1
warmup_s = 0.1
window_s = 0.5
[slo]
tpot_p95_ms = 100
"""


def test_a_scenario_file_cannot_run_code(tmp_path, runs):
    """Shell syntax and Python in every string a scenario can carry reach processes only as data."""
    marker = tmp_path / "PWNED"
    startup = tmp_path / "startup.py"
    startup.write_text(f"open({str(marker)!r}, 'w').close()\n")  # PYTHONSTARTUP runs only in interactive shells
    sp = tmp_path / "inject.toml"
    sp.write_text(INJECT.format(marker=marker, startup=startup))
    # --allow-env: even with the interpreter variables allowed (issue 18 refuses them by default,
    # see test_interpreter_hijacking_env_is_refused_unless_allowed), data stays data.
    h = headless(tmp_path, sp, "-v", "--allow-env")
    runs.append(h)
    rc = h.wait()
    out = h.stdout()
    # The mode's arguments reach the simulator as argv words: it refuses "1;touch" as a seed.
    assert rc == 1, out + h.stderr()
    assert "kvtui: error: mode m: bad_flag: " in out and "1;touch" in out
    assert not marker.exists()
    assert "Traceback" not in h.stderr()
    assert h.leftovers() == []


def test_kvtui_web_listens_on_loopback_only(tmp_path, knee_path):
    import signal
    import subprocess
    import sys

    from reliability_helpers import free_port

    snap = tmp_path / "s.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(knee_path), "--headless", "--fast", "--out", str(snap),
                        "--set", "server.extra_args=[]", "--set", "ramp.max=8"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    port = free_port()
    web = subprocess.Popen([sys.executable, "-m", "kvtui", "web", "--replay", str(snap), "--port", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        listen = wait_until(lambda: _listening(web.pid), 60, "kvtui web listening", web)
        assert listen == [("127.0.0.1", port)]
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        try:
            web.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(web.pid, signal.SIGKILL)
            web.wait(10)
