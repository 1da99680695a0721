#!/bin/bash
# The cells that ran on the lent H200 machines (2 GPUs, no network), each over an existing
# interpreter (`--python`): the image's python3 with official vLLM wheels carried as payloads
# (../shared/tools/device-payload) unpacked into .site/ and put on PYTHONPATH.
#   bash .gpu-tree/.github/gpu/h200-cells.sh PHASE      (from the checkout root on the machine)
# PHASE 1: (0.22.1, 0.8.1) server cell, float32 on GPU 0 and bfloat16 on GPU 1, at once
# PHASE 2: (0.22.1, 0.4.0.1) in-process cell, float32, both GPUs (TP=2 cases)
# PHASE 3: (0.24.0, 0.9.0) server cell float32 on GPU 0; (0.22.1, 0.3.0) in-process float32 on GPU 1
#          alone (its TP=2 cases skip with the reason: one GPU visible)
# Results and logs go to $OUT/phaseN.tgz. One cell per GPU at a time: vLLM asserts when another
# process frees GPU memory while it profiles (gpu_worker.py "Error in memory profiling").
set -uo pipefail
phase=${1:?phase 1, 2 or 3}
root=$(pwd); out=${OUT:-/tmp/out}; res=$root/.res/phase$phase
mkdir -p "$res" "$root/.site"
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1  # flashinfer is not carried
site() { echo "$root/.site/$1"; }
wheels() { local name=$1; shift; [ -d "$(site "$name")" ] || python3 -m pip install -q --no-index --no-deps \
  --no-compile --target "$(site "$name")" "$@"; }
release() { [ -d "$(site "$1")/vllm" ] || { mkdir -p "$(site "$1")" && tar -xJf "$2" -C "$(site "$1")"; }; }
path() { local p=""; for n in "$@"; do [ -d "$(site "$n")" ] || { echo "missing .site/$n (payload not carried, or a fresh machine)" >&2; exit 3; }; p="$p:$(site "$n")"; done; echo "${p#:}"; }
cell() {  # label gpus dtype site...
  local label=$1 gpus=$2 dtype=$3; shift 3
  local pp; pp=$(path "$@") || exit 3
  ( cd "$root/.gpu-tree" && start=$(date +%s) && CUDA_VISIBLE_DEVICES=$gpus PYTHONPATH=$pp python3 -m compat run \
      --python "$(command -v python3)" --dtype "$dtype" --gpu-memory-utilization 0.8 --cell-timeout 480 \
      --results "$res/$label/results" --reports "$res/$label/reports" > "$res/$label.log" 2>&1
    echo "$label exit $? in $(( $(date +%s) - start ))s" >> "$res/timings.txt" )
}
{ date -u; nvidia-smi; python3 -V; python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|transformers|tokenizers) '; } > "$res/machine.txt" 2>&1
if [ -d .device-0221 ]; then
  release v0221 .device-0221/vllm.tar.xz
  wheels common $(ls .device-0221/wheels/*.whl | grep -vE '/(speculators|hs_connectors)-')
  wheels s081 .device-0221/wheels/speculators-0.8.1-*.whl .device-0221/wheels/hs_connectors-0.8.1-*.whl
fi
if [ -d .device-t4 ]; then
  wheels t4 .device-t4/t4/*.whl; wheels s030 .device-t4/s030/*.whl; wheels s0401 .device-t4/s0401/*.whl
fi
if [ -d .device-024 ]; then
  release v024 .device-024/vllm.tar.xz
  wheels s090 .device-024/wheels/speculators-0.9.0-*.whl .device-024/wheels/hs_connectors-0.9.0-*.whl
fi
case $phase in
  1) cell v0221-s081-float32 0 float32 s081 common v0221 & cell v0221-s081-bfloat16 1 bfloat16 s081 common v0221 & wait ;;
  2) cell v0221-s0401-float32 0,1 float32 s0401 t4 common v0221 ;;
  3) cell v024-s090-float32 0 float32 s090 common v024 & cell v0221-s030-float32-1gpu 1 float32 s030 t4 common v0221 & wait ;;
esac
cat "$res/timings.txt"
tar -C "$root/.res" -czf "$out/phase$phase.tgz" "phase$phase"
ls -la "$out"
