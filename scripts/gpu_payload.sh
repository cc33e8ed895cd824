#!/bin/bash
# Carry several large files to the device in as few calls as the tree leaves room for.
#
# The vLLM bundle (../shared/gpu/build_bundle.sh), the SmolLM2 GGUF and the harness's wheels
# (scripts/h200_quality.sh stage) each came in folders of their own, so a run of issue 32 took
# nine staging calls. This packs them into one stream cut into folders of equal size (each fits
# a device call beside the tree), so every call but the last is full.
#
# HERE (no device time), from the project's root:
#   bash scripts/gpu_payload.sh pack FILE...       # -> .gpuP1 … .gpuPn (git-ignored), prints the calls
# ON THE DEVICE, back to back (the machine stays warm ~30 s between calls):
#   carry [".gpuPk"]: bash scripts/gpu_payload.sh stage       # each folder but the last
#   carry [".gpuPn"]: bash scripts/gpu_payload.sh unpack DIR  # joins, checks the md5, unpacks into DIR
set -euo pipefail
LIMIT=$((64 * 1024 * 1024))
MARGIN=$((2 * 1024 * 1024))   # the tree changes between packing and the call

case "${1:-}" in
pack)
  shift
  [ $# -gt 0 ] || { echo "gpu_payload: pack FILE..." >&2; exit 2; }
  # What travels: tracked and untracked-not-ignored files that exist (one moved aside does not).
  tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null || true) \
    | awk '{s+=$1} END {print s+0}')
  room=$((LIMIT - tree - MARGIN))
  [ "$room" -gt $((8 * 1024 * 1024)) ] || { echo "gpu_payload: the tree ($tree bytes) leaves no room under 64 MiB" >&2; exit 2; }
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  # Each file under its own base name: the device gets a flat folder.
  tar -cf "$work/payload.tar" --transform 's,.*/,,' "$@"
  md5sum "$work/payload.tar" | cut -d' ' -f1 > "$work/payload.md5"
  rm -rf .gpuP[0-9]*
  split -b "$room" -d -a 2 "$work/payload.tar" "$work/payload.tar.part"
  n=0
  for p in $(ls "$work"/payload.tar.part* | sort); do n=$((n + 1)); mkdir -p ".gpuP$n"; mv "$p" ".gpuP$n/"; done
  mv "$work/payload.md5" ".gpuP$n/"
  ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"
  grep -qx '/.gpu\*/' "$ex" 2>/dev/null || echo '/.gpu*/' >> "$ex"
  echo "tree $tree bytes, room $room a call; $n folders: $(du -sh .gpuP* | tr '\n\t' '  ')"
  echo "device calls: stage .gpuP1 … .gpuP$((n - 1)), then unpack with .gpuP$n" ;;
stage)  # on the device: park this call's part
  mkdir -p /tmp/stage && cp .gpuP*/payload.tar.part* /tmp/stage/ && ls /tmp/stage | tr '\n' ' ' && echo ;;
unpack)  # on the device, last call: join the parked parts with this call's own, check, unpack into DIR
  dir=${2:?"gpu_payload: unpack DIR"}
  mkdir -p /tmp/stage "$dir" && cp .gpuP*/payload.tar.part* /tmp/stage/
  cat $(ls /tmp/stage/payload.tar.part* | sort) > /tmp/stage/payload.tar
  [ "$(md5sum < /tmp/stage/payload.tar | cut -d' ' -f1)" = "$(cat .gpuP*/payload.md5)" ] || {
    echo "gpu_payload: the parked parts do not make the payload (a staging call missing, or the machine went cold)" >&2; exit 3; }
  tar -xf /tmp/stage/payload.tar -C "$dir" && rm -f /tmp/stage/payload.tar /tmp/stage/payload.tar.part*
  ls -l "$dir" ;;
*)
  echo "usage: bash scripts/gpu_payload.sh pack FILE... | stage | unpack DIR" >&2; exit 2 ;;
esac
