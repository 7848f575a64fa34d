#!/usr/bin/env bash
# Issue 33's GPU check of the MLX Piper decoders, in about 5 minutes of device time.
#
# Here, from the project root, once (MLX's CUDA wheels and the converted voice, ~150 MB, cut
# into .gpu/part1..N, four calls; see ../shared/gpu/README.md):
#   bench/engines/gpu_check.sh pack
# Then the calls it prints, back to back, the last one with this command:
#   bash .gpu/partN/trip.sh bash bench/engines/gpu_check.sh run        (timeout_s 330)
# There it prints, and leaves in $OUT: a fresh process's first window and warm-up (MLX's
# kernel cache empty), first audio and real-time factor alone (shipped against now), per-stream
# real-time factor batched at 1/4/16/64/256 (float32, float16), then a second fresh process's
# first window and warm-up with the kernel cache the first one left on disk.
set -euo pipefail

case "${1:-}" in
  pack)
    voice="${VOICEWS_CACHE_DIR:-$HOME/.cache/voicews}/mlx-piper"  # converted by any MLX run
    [ -d "$voice" ] || { echo "no converted voice in $voice: run the mlx-piper engine once" >&2; exit 1; }
    "${GPU_KIT:-../shared/gpu}/pack.sh" --file "$voice"   # GPU_KIT: the kit's folder
    ;;
  run)
    out="${OUT:-/tmp/gpu-check}"
    weights="${KIT_DATA:?run through trip.sh}/mlx-piper"
    export MLX_PTX_CACHE_DIR="$(mktemp -d)"   # empty: the first process pays the compilation
    nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv || true
    timeout 240 python3 bench/engines/mlx_ops_gpu.py --weights "$weights" --out "$out/first" \
      || echo "first process: exit $? (what it measured is in $out/first)"
    timeout 60 python3 bench/engines/mlx_ops_gpu.py --weights "$weights" --out "$out/second" --startup \
      || echo "second process: exit $?"
    du -sh "$MLX_PTX_CACHE_DIR" || true   # the kernel cache's size on disk
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
