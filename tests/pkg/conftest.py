"""tests/pkg: packaging, `kvtui init`, pre-flight (helpers in pkg_helpers.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def gpu_vllm(tmp_path, monkeypatch):
    """A vLLM GPU build as pip installs it (a `vllm` package and its dist-info), first on sys.path:
    what a GPU box has, where this one has only the CPU build."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    info = site / "vllm-0.26.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n")
    monkeypatch.syspath_prepend(str(site))
    return site
