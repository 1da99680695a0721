#!/bin/bash
# The server-era variants (compat/cell/server_models.py: DeepseekV3, hybrid, Model Runner V2,
# bfloat16) on one lent H200 over an official vLLM, one call per selection of variants:
#   ../shared/tools/device-payload 0.24.0 .device-024v speculators==0.9.0 hs-connectors==0.9.0 \
#       datasets==5.1.0 dill==0.4.1 multiprocess==0.70.19 loguru==0.7.3 pydantic-settings==2.16.3 python-dotenv==1.2.4 \
#       compressed-tensors==0.17.0      # vLLM 0.24.0 pins it; Qwen3-Next imports it at model inspection
#   bash .github/gpu/h200-server-variants.sh VARIANTS LABEL     (carry .device-024v; from the checkout root)
# VARIANTS: comma-separated names (`--variants`), or `unpack` to unpack and stop; the
# tiny Llama's own runs come first, since each variant is served with the launch flags they chose.
# float32 (the MLA DeepseekV3 runs in bfloat16: GPU MLA kernels take 16-bit only).
# MLA's prefill calls FlashAttention, whose .so device-payload strips: carry FlashAttention 3's
# (.device-fa3-024/fa3.tar.xz: vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so from the same wheel, pruned
# to sm_90 by prune_fatbin.py, 10.6 MB) in a second call, since both exceed 64 MiB together.
# Unpacked payloads stay in .site/ (git-ignored) for the next call on the still-warm machine.
# Results and logs come back as $OUT/LABEL.tgz.
set -uo pipefail
variants=${1:?comma-separated variants}; label=${2:?label}
root=$(pwd); out=${OUT:-/tmp/out}; site=$root/.site/v024v; res=$root/.res/$label
mkdir -p "$site" "$res" "$root/.site/tvshim"
if [ ! -d "$site/vllm" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$root"/.device-024v/wheels/*.whl || exit 3
  tar -xJf "$root/.device-024v/vllm.tar.xz" -C "$site" || exit 3
fi
if [ -f "$root/.device-fa3-024/fa3.tar.xz" ] && [ ! -f "$site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" ]; then
  tar -xJf "$root/.device-fa3-024/fa3.tar.xz" -C "$site" || exit 3
fi
[ "$variants" = unpack ] && { ls "$site" | wc -l; exit 0; }
# datasets <= 5.1 x torchvision 0.26: see tvshim/sitecustomize.py (prepare-data only)
cp "$root/.github/gpu/tvshim/sitecustomize.py" "$root/.site/tvshim/"
export PYTHONPATH=$site:$root/.site/tvshim VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
{ date -u; nvidia-smi; python3 -V; python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|transformers|tokenizers) ';
  echo "variants: $variants"; } > "$res/machine.txt" 2>&1
start=$(date +%s)
python3 -m compat run --python "$(command -v python3)" --dtype float32 --gpu-memory-utilization 0.8 \
  --variants "$variants" --cell-timeout "${COMPAT_CELL_TIMEOUT:-480}" --results "$res/results" --reports "$res/reports" > "$res/runner.log" 2>&1
echo "$label exit $? in $(( $(date +%s) - start ))s" >> "$res/timings.txt"
cat "$res/timings.txt"
tar -C "$root/.res" -czf "$out/$label.tgz" "$label"
ls -la "$out"
