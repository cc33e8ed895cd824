"""Helpers shared by the vLLM engine tests (imported by name: tests/ has no packages)."""

from __future__ import annotations

from pathlib import Path

from vllm_available import missing

from kvtui.io.scenario.schema import Scenario, Server

DATA = Path(__file__).parent / "data"
KV_BYTES = 50_000_000  # the KV budget of the real-vLLM tests (24,320 tokens of the tiny model)


def read_log(name: str) -> str:
    """A captured file by its name: the larger ones are stored xz-compressed (NAME.xz) to keep the
    tracked tree small; the text is the same."""
    import lzma

    xz = DATA / (name + ".xz")
    raw = lzma.decompress(xz.read_bytes()) if xz.exists() else (DATA / name).read_bytes()
    return raw.decode("utf-8", errors="replace")


def vllm_import_error() -> str | None:
    """None when `import vllm` works in this interpreter (checked once per test process, in a child:
    it imports torch; tests/vllm_available.py)."""
    return missing("vllm", "vllm.entrypoints.openai.api_server")


def proc_in_group(pgid: int) -> list[int]:
    """Processes (not zombies) whose process group is pgid, listed from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(d.name))
    return out


def tiny_scenario(model: Path, **server) -> Scenario:
    kw = dict(
        engine="vllm",
        model=str(model),
        served_model_name="tiny",
        max_model_len=2048,
        kv_cache_memory_bytes=KV_BYTES,
        startup_timeout_s=600,
        stop_timeout_s=30,
    )
    kw.update(server)
    return Scenario(server=Server(**kw))
