#!/usr/bin/env bash
# The installs users actually do, each into a fresh virtual environment, from a wheel built from
# this checkout (what `pip install .`, `pipx install` and `uv tool install` all do: NOT editable,
# so nothing may come from the checkout): `kvtui --version`, the demo headless (`run --headless
# --fast`), the TUI's first screen through Textual's pilot; then `uv tool install` of the same
# wheel (pipx when uv cannot be installed). Run from outside the checkout. Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
PY=${PYTHON_BUILD:-python3}
t0=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtui-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
say() { echo "check-wheel: $* ($(( $(date +%s) - t0 )) s)"; }

"$PY" -m pip wheel -q --no-deps . -w "$work/dist"
wheel=$(ls "$work"/dist/kvtui-*.whl)
say "built $(basename "$wheel")"
files=$("$PY" -m zipfile -l "$wheel")
for f in kvtui/data/scenarios/sim-demo.toml kvtui/data/themes/kvtui-dark.toml kvtui/data/models/llama-3.1-8b.json; do
  grep -q "$f" <<<"$files" || { echo "check-wheel: $f is not in the wheel"; exit 1; }
done

# The wheel's dependencies fetched once (a wheelhouse), so that pip and uv install the same set quickly.
"$PY" -m pip wheel -q "$wheel" -w "$work/wheelhouse" 2> >(grep -v "is ignored: it is neither" >&2)
say "fetched the dependencies"
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --find-links "$work/wheelhouse" kvtui
say "installed into a fresh venv (not editable)"

cd "$work"   # away from the checkout
export KVTUI_HOME="$work/home"
bin="$work/venv/bin"
"$bin/kvtui" --version
grep -q "site-packages/kvtui/data/scenarios/sim-demo.toml" <<<"$("$bin/kvtui" scenarios --paths)"
"$bin/kvtui" run --headless --fast --out "$work/demo.json" > "$work/demo.log"
grep -q "max concurrency at SLO" "$work/demo.log" && test -s "$work/demo.json"
say "kvtui --version, kvtui scenarios and the demo headless ran from the wheel"

"$bin/python" - <<'PILOT'
# The TUI's first screen, as `kvtui` shows it: the demo's dashboard, started at once.
import asyncio, os
from kvtui.paths import demo_scenario, shipped
from kvtui.io.scenario import load_scenario
from kvtui.tui.app import create_app

assert "site-packages" in str(demo_scenario()), demo_scenario()

def text(app):
    return "\n".join(s.text for s in app.screen._compositor.render_strips())

async def main():
    # the demo started at once, as `kvtui` does (its steps simulated offline, --fast, to keep CI short)
    app = create_app(load_scenario(demo_scenario()), out=os.path.join(os.environ["KVTUI_HOME"], "tui.json"), autostart=True, fast=True)
    async with app.run_test(size=(120, 40)) as pilot:
        # Until the first step is in the state *and* the screen has been redrawn since (the dashboard
        # refreshes on its own timer, so a --fast step can land in the state while the last frame drawn
        # still says STARTING: CI once caught exactly that frame). A guard against a hang, not a timing check.
        shown = ""
        for _ in range(600):
            await pilot.pause(0.2)
            if app.state.modes and any(m.steps for m in app.state.modes.values()):
                shown = text(app)
                if "SIMULATED" in shown:
                    break
        shown = text(app)
        assert "SIMULATED" in shown and "sim-demo" in shown, shown
        assert app.theme == "kvtui-dark" and not app.theme_problems, (app.theme, app.theme_problems)
        await pilot.press("q")
    names = {p.stem for p in shipped("scenarios")}
    assert {"sim-demo", "h200-llama8b"} <= names, names
    print("check-wheel: the TUI's first screen: the demo's dashboard, theme", app.theme)

asyncio.run(main())
PILOT
say "the TUI's first screen through the pilot"

# uv tool install (pipx where uv cannot be had): the wheel as a CLI tool with its own venv.
"$PY" -m venv "$work/tools"
if "$work/tools/bin/python" -m pip install -q uv 2>/dev/null; then  # from the registry, as a user would
  UV_TOOL_DIR="$work/uv-tools" UV_TOOL_BIN_DIR="$work/uv-bin" UV_CACHE_DIR="$work/uv-cache" \
    "$work/tools/bin/uv" tool install -q --python "$PY" --no-index --find-links "$work/wheelhouse" kvtui
  tool="$work/uv-bin/kvtui"; how="uv tool install"
elif "$work/tools/bin/python" -m pip install -q pipx 2>/dev/null; then
  PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/pipx-bin" "$work/tools/bin/pipx" install --python "$PY" \
    --pip-args="--no-index --find-links $work/wheelhouse" "$wheel" >/dev/null
  tool="$work/pipx-bin/kvtui"; how="pipx install"
else
  echo "check-wheel: neither uv nor pipx could be installed from the registry: tool install not tried"; tool=""
fi
if [ -n "$tool" ]; then
  "$tool" --version
  "$tool" run --headless --fast --mode fp8-kv --out "$work/tool.json" > "$work/tool.log"
  grep -q "max concurrency at SLO" "$work/tool.log"
  say "$how of the wheel: kvtui --version and the demo ran"
fi
say "done"
