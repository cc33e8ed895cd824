"""A run made on a GPU box names its own local model path (/tmp/model8b on the device), absent where
the snapshot is read later: the prediction keeps the model's config.json, so `kvtui whatif` and
`kvtui calibrate` rebuild the shape from the snapshot alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvtui import DATA_DIR
from kvtui.explore.prediction import model_config_of, model_from_snapshot
from kvtui.simulator.model import catalog

BUNDLED = DATA_DIR / "models" / "llama-3.1-8b.json"


def test_a_local_model_folder_is_kept_as_its_config(tmp_path):
    folder = tmp_path / "model8b"
    folder.mkdir()
    shutil.copy(BUNDLED, folder / "config.json")
    cfg = model_config_of(str(folder))
    assert cfg == json.loads(BUNDLED.read_text())
    assert model_config_of("llama-3.1-8b") is None  # a bundled name needs nothing kept
    assert model_config_of(str(tmp_path / "nowhere")) is None


def test_a_vanished_path_is_rebuilt_from_the_kept_config(tmp_path):
    cfg = json.loads(BUNDLED.read_text())
    ref = model_from_snapshot("/nonexistent/model8b", {"model_config": cfg})
    assert ref is not None and Path(ref).name == "model8b"
    a, b = catalog.load_model(ref), catalog.load_model(str(BUNDLED))
    assert (a.layers, a.kv_heads, a.head_dim) == (b.layers, b.kv_heads, b.head_dim)
    assert model_from_snapshot("/nonexistent/model8b", {}) is None  # nothing kept: the caller says so
    assert model_from_snapshot("llama-3.1-8b", None) == "llama-3.1-8b"  # readable as it is
