#!/bin/bash
# Re-split the vLLM bundle of ../shared/gpu/build_bundle.sh so that each device call fits.
#
# A device call carries at most 64 MiB, the working tree included, and the tree grows with every
# published run (docs/results: ~31 MB after the KV-bound H200 run, 44 MB after the five-mode runs; since
# issue 17 a published run is archived, `python -m kvtui.report.archive X.json`, and the whole tree is
# under 15 MB), so the bundle's three 48 MiB parts no longer fit beside it. This joins the parts of .gpu1 … .gpuN (checked against
# the bundle's md5), and cuts them again into as many staging folders as the tree leaves room
# for. The last folder carries the rest of the bundle, the wheels, the model and the scripts.
#
# Run from the project's root after build_bundle.sh (or on folders this script made before):
#   bash scripts/gpu_bundle_split.sh
# Then, on the device, back to back (the machine stays warm 30 s between calls):
#   carry [".gpu1"]: bash .gpu1/bin/stage.sh    … one call per folder but the last …
#   carry [".gpuN"]: bash .gpuN/bin/install.sh && source /tmp/gpu-env.sh && <experiment>
set -euo pipefail
LIMIT=$((64 * 1024 * 1024))
MARGIN=$((2 * 1024 * 1024))   # the tree changes between this script and the call: logs, notes

dirs=$(ls -d .gpu[0-9]* | sort -V)
last=$(echo "$dirs" | tail -1)
[ -f "$last/vllm026.md5" ] || { echo "gpu_bundle_split: $last/vllm026.md5 missing: run ../shared/gpu/build_bundle.sh first" >&2; exit 2; }

# What travels: tracked and untracked-not-ignored files that exist (a file moved aside for the calls
# does not; stat's error on it must not end the script under pipefail).
tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null || true) \
  | awk '{s+=$1} END {print s+0}')
extras=$(du -cb "$last/bin" "$last/deps" "$last/model8b.tar.xz" "$last/vllm026.md5" | tail -1 | cut -f1)
room=$((LIMIT - tree - MARGIN))
[ "$room" -gt $((8 * 1024 * 1024)) ] || { echo "gpu_bundle_split: the tree ($tree bytes) leaves no room under 64 MiB" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat $(for d in $dirs; do ls "$d"/vllm026.tar.xz.part* 2>/dev/null; done | awk -F/ '{print $NF "\t" $0}' | sort | cut -f2) > "$work/vllm026.tar.xz"
[ "$(md5sum "$work/vllm026.tar.xz" | cut -d' ' -f1)" = "$(cat "$last/vllm026.md5")" ] || { echo "gpu_bundle_split: joined bundle fails its md5" >&2; exit 2; }
cp -r "$last/bin" "$last/deps" "$last/model8b.tar.xz" "$last/vllm026.md5" "$work/"

total=$(stat -c %s "$work/vllm026.tar.xz")
# Staging folders carry `room` bytes each; the last one also the extras.
n=1
while [ $(( (n - 1) * room + (room - extras) )) -lt "$total" ]; do n=$((n + 1)); done
rm -rf $dirs
for i in $(seq 1 "$n"); do mkdir -p ".gpu$i/bin"; done
split -b "$room" -d -a 2 "$work/vllm026.tar.xz" "$work/vllm026.tar.xz.part"
parts=$(ls "$work"/vllm026.tar.xz.part* | sort)
i=1
for p in $parts; do
  mv "$p" ".gpu$i/"
  i=$((i + 1))
done
for i in $(seq 1 "$n"); do cp "$work"/bin/*.sh ".gpu$i/bin/"; done
mv "$work/deps" "$work/model8b.tar.xz" "$work/vllm026.md5" ".gpu$n/"

# Scripts that know the new layout: every folder's stage.sh parks its parts in /tmp/stage; the
# last folder's install.sh joins whatever is parked with its own.
for i in $(seq 1 "$n"); do
cat > ".gpu$i/bin/stage.sh" <<'EOF'
#!/bin/bash
# Staging call (carry one .gpuK folder; back to back while the machine is warm): park its parts.
mkdir -p /tmp/stage
for f in .gpu*/vllm026.tar.xz.part*; do [ -f "$f" ] && cp "$f" /tmp/stage/ && echo "staged $f"; done
if [ ! -f /tmp/stage/.facts ]; then
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  python3 -c 'import torch,sys;print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
  touch /tmp/stage/.facts
fi
EOF
sed -e "s/@N@/$n/" > ".gpu$i/bin/install.sh" <<'EOF'
#!/bin/bash
# The last call (carry .gpu@N@), right after the staging calls: join the parts, install vLLM and
# its missing dependencies into /tmp/site, unpack the dummy model into /tmp/model8b.
set -e
mkdir -p /tmp/stage
cp .gpu@N@/vllm026.tar.xz.part* /tmp/stage/ 2>/dev/null || true
want=$(cat .gpu@N@/vllm026.md5)
cat $(ls /tmp/stage/vllm026.tar.xz.part* | sort) > /tmp/stage/vllm026.tar.xz
[ "$(md5sum /tmp/stage/vllm026.tar.xz | cut -d' ' -f1)" = "$want" ] || { echo "COLD or incomplete: the staged parts do not make the bundle (staging calls must run first, on a warm machine)"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu@N@/deps/*.whl 2>&1 | grep -v "Target directory" || true
xz -dc -T0 /tmp/stage/vllm026.tar.xz | tar x -C /tmp/site
tar xJf .gpu@N@/model8b.tar.xz -C /tmp
# xgrammar 0.2.9 passes extra_lib_paths= to apache-tvm-ffi 0.1.10 (vLLM's pin), which lacks it.
sed -i "s/, extra_lib_paths=package_paths//" /tmp/site/xgrammar/load_binding.py
cp .gpu@N@/bin/env.sh /tmp/gpu-env.sh
source /tmp/gpu-env.sh
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
EOF
done
grep -qx '/.gpu\*/' .git/info/exclude 2>/dev/null || echo '/.gpu*/' >> .git/info/exclude
echo "tree $tree bytes; $n folders:"
for i in $(seq 1 "$n"); do echo "  .gpu$i $(du -sb ".gpu$i" | cut -f1) bytes (+ tree = $(( $(du -sb ".gpu$i" | cut -f1) + tree )) of $LIMIT)"; done
echo "device calls: $(for i in $(seq 1 $((n - 1))); do printf 'stage .gpu%s, ' "$i"; done)install .gpu$n"
