#!/usr/bin/env bash
# Issue 33's GPU check of the MLX Piper engine, in about 5 minutes of device time.
#
# Here, from the project root, once (MLX's CUDA wheels, the server's own wheels for Python
# 3.12, the converted voice and the bundled voice's .onnx; cut into .gpu/part1..N, ~50 MiB
# each; see ../shared/gpu/README.md):
#   bench/engines/gpu_check.sh pack
# Then the calls it prints, back to back, the last one with this command:
#   bash .gpu/partN/trip.sh bash bench/engines/gpu_check.sh run        (timeout_s 330)
# There it prints, and leaves in $OUT:
#  1. first/: a fresh process's first window and warm-up (MLX's kernel cache empty), first
#     audio and real-time factor alone (shipped streaming decoder against whole windows),
#     sentences begun together (encoder, durations, flow) against each alone at 1/4/16/64/256,
#     per-stream real-time factor batched at 1/4/16/64/256 (float32, float16, its SNR);
#  2. second/: a second fresh process's first window and warm-up, with the kernel cache the
#     first one left on disk;
#  3. load/: a real `voicews serve --engine mlx-piper --fronts 4` (sessions in 4 front
#     processes, the GPU in one; VOICEWS_FRONTS sets how many): launch to /readyz ready
#     (warming meanwhile), the warm-up it logged and the device, then bursts of 1, 16, 64 and
#     256 conversations at 20 tokens/s (first audio p50/p95, longest stall, batched steps, the
#     fronts' event loops' CPU).
# Without a GPU, to see that it is not broken (MLX's CPU backend, tiny sizes, ~3 minutes):
#   bench/engines/gpu_check.sh smoke
#
# `kokoro` after pack, run or smoke checks MLX Kokoro instead (its own trips: MLX's wheels,
# the server's, and Kokoro's int8 ONNX export, 92 MB, converted there on first use; 5 pieces):
#  1. first/: a fresh process's engine and warm-up, first audio and real-time factor alone,
#     N = 1/4/16/64 copies of a first piece begun (prosody) and decoded together;
#  2. second/: a second fresh process's warm-up, with the kernel cache the first one left;
#  3. load/: a real `voicews serve --engine mlx-kokoro`, bursts of 1, 16 and 64.
set -euo pipefail

# The server's imports beyond what the device's python3 has (numpy, onnx, onnxruntime,
# msgpack): pinned as tested here, installed there with --no-deps (each found for CPython
# 3.12 manylinux x86_64 in the package index here, `pip install --dry-run`, not packed yet).
SERVER_WHEELS=(
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  websockets==17.4 uvicorn==0.55.0 h11==0.16.0 click==8.5.1 prometheus-client==0.26.0
  piper-tts==1.8.0 soxr==1.0.0 av==18.1.0 num2words==0.5.14
)

case "${1:-} ${2:-}" in
  "pack kokoro")
    onnx="$("${PYTHON:-python3}" -c 'from voicews.engines.kokoro.assets import model_path as m; print(m())')"
    staged="$(mktemp -d)"
    mkdir "$staged/kokoro" && cp "$onnx" "$staged/kokoro/"   # lands as $KIT_DATA/kokoro there
    wheels=()
    for w in "${SERVER_WHEELS[@]}"; do wheels+=(--wheel "$w"); done
    "${GPU_KIT:-../shared/gpu}/pack.sh" "${wheels[@]}" --file "$staged/kokoro"
    rm -rf "$staged"
    ;;
  "run kokoro")
    out="${OUT:-/tmp/gpu-check}"
    export VOICEWS_CACHE_DIR="${KIT_DATA:?run through trip.sh}"
    export MLX_PTX_CACHE_DIR="$(mktemp -d)"   # empty: the first process pays the compilation
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    timeout 170 python3 bench/engines/mlx_kokoro_gpu.py --out "$out/first" \
      || echo "first process: exit $? (what it measured is in $out/first)"
    timeout 40 python3 bench/engines/mlx_kokoro_gpu.py --out "$out/second" --startup \
      || echo "second process: exit $?"
    export VOICEWS_MLX_MAX_BATCH="${VOICEWS_MLX_MAX_BATCH:-64}"
    timeout 100 python3 -m bench gpu_load --engine mlx-kokoro --n 1 16 64 --ready-limit 60 \
      --out "$out/load" || echo "load run: exit $? (what it measured is in $out/load)"
    ;;
  "smoke kokoro")
    out="${OUT:-$(mktemp -d)}"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    python3 bench/engines/mlx_kokoro_gpu.py --cpu-smoke --out "$out/first"
    python3 bench/engines/mlx_kokoro_gpu.py --cpu-smoke --out "$out/second" --startup
    # One conversation: two at once outlast the harness's 2 minutes a turn on MLX's CPU.
    python3 -m bench gpu_load --engine mlx-kokoro --cpu-smoke --n 1 --out "$out/load"
    echo "smoke: all three stages ran; results in $out"
    ;;
  "pack ")
    cache="${VOICEWS_CACHE_DIR:-$HOME/.cache/voicews}"
    [ -d "$cache/mlx-piper" ] || { echo "no converted voice in $cache/mlx-piper: run the mlx-piper engine once" >&2; exit 1; }
    onnx="$("${PYTHON:-python3}" -c 'from voicews.engines.piper import bundled_voice as v; print(v())')"  # PYTHON: the project's venv
    wheels=()
    for w in "${SERVER_WHEELS[@]}"; do wheels+=(--wheel "$w"); done
    "${GPU_KIT:-../shared/gpu}/pack.sh" "${wheels[@]}" --file "$cache/mlx-piper" \
      --file "$onnx" --file "$onnx.json"
    ;;
  "run ")
    out="${OUT:-/tmp/gpu-check}"
    data="${KIT_DATA:?run through trip.sh}"
    export MLX_PTX_CACHE_DIR="$(mktemp -d)"   # empty: the first process pays the compilation
    nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv || true
    timeout 140 python3 bench/engines/mlx_ops_gpu.py --weights "$data/mlx-piper" --out "$out/first" \
      || echo "first process: exit $? (what it measured is in $out/first)"
    timeout 30 python3 bench/engines/mlx_ops_gpu.py --weights "$data/mlx-piper" --out "$out/second" --startup \
      || echo "second process: exit $?"
    du -sh "$MLX_PTX_CACHE_DIR" || true   # the kernel cache's size on disk
    export VOICEWS_CACHE_DIR="$data" VOICEWS_MLX_MAX_BATCH="${VOICEWS_MLX_MAX_BATCH:-64}"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # the server runs from a scratch folder
    timeout 120 python3 -m bench gpu_load --n 1 16 64 256 --ready-limit 60 --out "$out/load" \
      --server-args="--voice $data/$(ls "$data" | grep '\.onnx$' | head -1) --max-waiting-per-address 1024 --fronts ${VOICEWS_FRONTS:-4}" \
      || echo "load run: exit $? (what it measured is in $out/load)"
    ;;
  "smoke ")
    out="${OUT:-$(mktemp -d)}"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    python3 bench/engines/mlx_ops_gpu.py --cpu-smoke --out "$out/first"
    python3 bench/engines/mlx_ops_gpu.py --cpu-smoke --out "$out/second" --startup
    python3 -m bench gpu_load --cpu-smoke --out "$out/load" --server-args="--fronts 2"
    echo "smoke: all three stages ran; results in $out"
    ;;
  *)
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
