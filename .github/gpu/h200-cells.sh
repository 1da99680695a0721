#!/bin/bash
# The cells that ran on the lent H200 machines (2 GPUs, no network), each over an existing
# interpreter (`--python`): the image's python3 with official vLLM wheels carried as payloads
# (../shared/tools/device-payload) unpacked into .site/ and put on PYTHONPATH.
#   bash .gpu-tree/.github/gpu/h200-cells.sh PHASE      (from the checkout root on the machine)
# PHASE 1: (0.22.1, 0.8.1) server cell on GPU 0, and (0.22.1, 0.3.0) in-process on GPU 1 alone
#          (its TP=2 cases skip with the reason: one GPU visible); float32. On one GPU: 1a then 1b
#          (two calls: the two cells do not fit one 10-minute call)
# PHASE 2: (0.22.1, 0.4.0.1) in-process cell, float32, both GPUs (TP=2 cases)
# PHASE 3: (0.24.0, 0.9.0) server cell, float32 on GPU 0 and bfloat16 on GPU 1 (on one GPU: in turn)
# PHASE 4a / 4b: bfloat16 on one GPU: the (0.22.1, 0.8.1) server cell / the (0.22.1, 0.4.0.1) in-process cell
# PHASE kimi: the Kimi suite's scale model with --mla-fixture (latent 512 + 64 = 576: vLLM's MLA
#          metadata takes 320 or 576 only) over 0.22.1 x 0.4.0.1, MLA on,
#          TP = the GPUs visible (at most 2); needs .device-fa3 (FlashAttention 3's .so: MLA's
#          prefill kernel on Hopper) carried beside .device-0221
# Payload folders carried: .device-0221 or .device-024, each vllm.tar.xz (the slimmed release) and
# deps.tar.xz (site folders: common = what the image lacks, t4 = transformers 4.57.6 + its hub and
# tokenizers, sNNN = one speculators release with its hs-connectors).
# Results and logs go to $OUT/phaseN.tgz. One cell per GPU at a time: vLLM asserts when another
# process frees GPU memory while it profiles (gpu_worker.py "Error in memory profiling").
set -uo pipefail
phase=${1:?phase 1, 1a, 1b, 2, 3, 4a, 4b or kimi}
root=$(pwd); out=${OUT:-/tmp/out}; res=$root/.res/phase$phase
mkdir -p "$res" "$root/.site"
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1  # flashinfer is not carried
# nor FlashAttention: bfloat16 would pick it; float32 gets Triton anyway (recorded in each cell's settings)
export COMPAT_SERVE_ARGS="--attention-backend TRITON_ATTN"
site() { echo "$root/.site/$1"; }
release() { [ -d "$(site "$1")/vllm" ] || { mkdir -p "$(site "$1")" && tar -xJf "$2" -C "$(site "$1")"; }; }
path() { local p=""; for n in "$@"; do [ -d "$(site "$n")" ] || { echo "missing .site/$n (payload not carried, or a fresh machine)" >&2; exit 3; }; p="$p:$(site "$n")"; done; echo "${p#:}"; }
began=$(date +%s); ngpu=$(nvidia-smi -L | grep -c '^GPU ')
cell() {  # label gpus dtype site...   (COMPAT_CELL_TIMEOUT: seconds for the cell's probes)
  local label=$1 gpus=$2 dtype=$3; shift 3
  local pp; pp=$(path "$@") || exit 3
  ( cd "$root/.gpu-tree" && start=$(date +%s) && CUDA_VISIBLE_DEVICES=$gpus PYTHONPATH=$pp python3 -m compat run \
      --python "$(command -v python3)" --dtype "$dtype" --gpu-memory-utilization 0.8 --cell-timeout "${COMPAT_CELL_TIMEOUT:-480}" \
      --results "$res/$label/results" --reports "$res/$label/reports" > "$res/$label.log" 2>&1
    echo "$label exit $? in $(( $(date +%s) - start ))s" >> "$res/timings.txt" )
}
{ date -u; nvidia-smi; python3 -V; python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|transformers|tokenizers) '; } > "$res/machine.txt" 2>&1
for bundle in .device-0221:v0221 .device-024:v024; do
  dir=${bundle%%:*}; name=${bundle##*:}
  [ -d "$dir" ] || continue
  release "$name" "$dir/vllm.tar.xz"
  [ -f "$root/.site/.deps-$name" ] || { tar -xJf "$dir/deps.tar.xz" -C "$root/.site" && touch "$root/.site/.deps-$name"; }
  tar -xJf "$dir/extra.tar.xz" -C "$root/.site"  # loguru, pydantic-settings, dotenv, typer-slim
done
# datasets <= 5.1 x torchvision 0.26: see tvshim/sitecustomize.py (server cells' prepare-data only)
mkdir -p "$root/.site/tvshim" && cp "$root/.gpu-tree/.github/gpu/tvshim/sitecustomize.py" "$root/.site/tvshim/"
case $phase in
  1) cell v0221-s081-float32 0 float32 tvshim s081 common v0221 & cell v0221-s030-float32-1gpu 1 float32 s030 t4 common v0221 & wait ;;
  1a) cell v0221-s081-float32 0 float32 tvshim s081 common v0221 ;;
  1b) cell v0221-s030-float32-1gpu 0 float32 s030 t4 common v0221 ;;
  4a) cell v0221-s081-bfloat16 0 bfloat16 tvshim s081 common v0221 ;;
  4b) cell v0221-s0401-bfloat16-1gpu 0 bfloat16 s0401 t4 common v0221 ;;
  kimi) [ -f "$root/.device-fa3/fa3.tar.xz" ] || [ -f "$(site v0221)/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" ] \
          || { echo "missing .device-fa3/fa3.tar.xz: MLA's prefill kernel needs FlashAttention 3" >&2; exit 3; }
        [ -f "$root/.device-fa3/fa3.tar.xz" ] && tar -xJf "$root/.device-fa3/fa3.tar.xz" -C "$(site v0221)"
        tp=$(( ngpu >= 2 ? 2 : 1 )); pp=$(path s0401 t4 common v0221) || exit 3
        ( cd "$root/.gpu-tree" && start=$(date +%s) && PYTHONPATH=$pp VLLM_WORKER_MULTIPROC_METHOD=spawn TRITON_F32_DEFAULT=ieee \
            HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python3 -m compat.kimi --scale-model --mla-fixture --backend gpu --tp $tp \
            --python "$(command -v python3)" --timeout 420 --results "$res/kimi-tp$tp/results" \
            --reports "$res/kimi-tp$tp/reports" > "$res/kimi-tp$tp.log" 2>&1
          echo "kimi-tp$tp exit $? in $(( $(date +%s) - start ))s" >> "$res/timings.txt" ) ;;
  2) cell v0221-s0401-float32 0,1 float32 s0401 t4 common v0221 ;;
  3) if [ "$ngpu" -ge 2 ]; then
       cell v024-s090-float32 0 float32 tvshim s090 common v024 & cell v024-s090-bfloat16 1 bfloat16 tvshim s090 common v024 & wait
     else  # one GPU: one after the other, the second within what is left of ~9.5 minutes
       cell v024-s090-float32 0 float32 tvshim s090 common v024
       COMPAT_CELL_TIMEOUT=$(( 560 - $(date +%s) + began )) cell v024-s090-bfloat16 0 bfloat16 tvshim s090 common v024
     fi ;;
esac
cat "$res/timings.txt"
tar -C "$root/.res" -czf "$out/phase$phase.tgz" "phase$phase"
ls -la "$out"
