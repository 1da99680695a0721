#!/bin/bash
# One official vLLM release the GPU half had not run, on one lent H200, in at most 10 minutes a call:
# its server cell x speculators 0.9.0 (hs-connectors 0.9.0) with the server-era variants, and one
# in-process pair (x speculators 0.4.0.1). Each cell runs over the image's python3 with `--python`
# (nothing installed by the harness); the harness sets TRITON_F32_DEFAULT=ieee and
# VLLM_WORKER_MULTIPROC_METHOD=spawn (each result's `settings`).
#   ../shared/tools/device-payload 0.26.0 .device speculators==0.9.0 hs-connectors==0.9.0 \
#       datasets==5.1.0 dill==0.4.1 multiprocess==0.70.19 loguru==0.7.3 pydantic-settings==2.16.3 \
#       python-dotenv==1.2.4 compressed-tensors==0.17.0 ijson==3.4.0
#   mkdir -p .device/s0401 && pip download --no-deps speculators==0.4.0.1 -d .device/s0401
#   .device-fa3/fa3.tar.xz: vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so from the same wheel, pruned to sm_90
#       (prune_fatbin.py), xz -9e (7.9 MB): MLA's prefill (FLASH_ATTN) and bfloat16 attention need it.
#       .device (55.6 MB: 0.26.0 also imports llguidance at `vllm serve`) and it exceed 64 MiB together with
#       the checkout: run `rest` carrying .device first (float32 only, no FlashAttention needed), then at
#       once (the machine stays warm 30 s; .site/ is kept) `mla` carrying .device-fa3 alone.
#   bash .github/gpu/h200-release.sh PHASE      (carry .device and .device-fa3; from the checkout root)
# PHASE `mla`: the server cell with deepseek_v3 + llama-bfloat16 (--variants); `rest`: the
#   server cell with hybrid + llama-runner_v2, then the in-process (0.26.0, 0.4.0.1) cell in what is
#   left of ~9.5 minutes; `server-rest`: that server cell alone; `hybrid-bf16`: the server cell with
#   hybrid (served in bfloat16 on the Triton GDN prefill since the float32 refusal) + llama-bfloat16
#   (carry .device-fa3: bfloat16 attention takes FlashAttention); `llama`: the server cell with no
#   variant (float32 Llama: the contract probes and the reference check, no FlashAttention); `llama081`: the
#   same with speculators 0.8.1 (s081/ in a carried folder); `llama-both`: `llama`, then `llama081`;
#   `unpack`: only install what was carried (the first of two back-to-back calls); `stash`: only keep the
#   payload parts carried (see the split below) and the shared wheels; `dry`: unpack and
#   print what would run. float32 (the MLA DeepseekV3 runs in bfloat16: GPU MLA takes 16-bit only).
# No flashinfer travels (its GDN prefill is JIT-compiled, no nvcc here): the hybrid takes vLLM's
# Triton GDN prefill where the build has --gdn-prefill-backend (compat/cell/server_models.py).
# The in-process cell runs speculators 0.4.0.1 over vLLM 0.26.0's pins (transformers 5.17, torch
# 2.11): speculators 0.4.0.1 pins transformers <= 4.57.6 and torch <= 2.10, vLLM 0.26.0
# transformers >= 5.5.3 and torch 2.11.0, so no resolver installs the pair; what runs is 0.4.0.1's
# code against 0.26.0 (the cell's notes say the interpreter was used as found).
# Variants are chosen with `--variants` (the cell's id, settings and manifest say so; the 0.26.0 run of
# reports/gpu-h200/0.26.0-s090 chose them through the environment, which its records do not show).
# 0.23.0 (2026-12-02): ../shared/tools/device-payload 0.23.0 .device23 <the extras above>; .device23-mc/wheels:
#   mistral_common==1.13.1 pycountry==26.2.16 pydantic-extra-types==2.11.1 tiktoken==0.14.0 sentencepiece==0.2.3
#   jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 (cv2 is optional
#   to mistral_common); .device23-mc/s081: speculators==0.8.1 hs-connectors==0.8.1. Call 1 carries .device23
#   (`unpack`), call 2 at once carries .device23-mc (`llama-both`).
# speculators 0.8.0 (2026-12-02, issue 29): SPEC=080 with phase `llama-spec` (or `spec-layer0`): the server cell
#   with no variant x speculators 0.8.0 + hs-connectors 0.8.0 from .site/s080 (wheels in $PAYLOAD/s080 or
#   $PAYLOAD-mc/s080). The checkout alone is ~32 MB now, so each call carries at most ~33 MB beside it:
#   .device23/vllm.tar.xz is device-payload's 0.23.0 tarball re-packed without vllm/_moe_C.abi3.so (14 MB xz;
#   imported under contextlib.suppress(ImportError), no dense-Llama op in it), 23 MB; device-payload's wheels/
#   (the same for every release) travel apart as .device-wheels-a/ and .device-wheels-b/, installed once into
#   .site/common (after the release's site on PYTHONPATH) and shared by every release of the warm machine;
#   .device23-mc/wheels holds the mistral_common set above less tiktoken and sentencepiece (the image has
#   tiktoken 0.14.0 and sentencepiece 0.2.2; mistral_common needs tiktoken >= 0.7 only), .device23-mc/s080 the
#   two 0.8.0 wheels; .device24/ and .device26/vllm.tar.xz are device-payload's re-packed without
#   vllm/_moe_C_stable_libtorch.abi3.so (0.24+: imported in try/except ImportError, a warning), 24 and 21 MB.
#   Calls, back to back (.site/ stays on a warm machine), each from .gpu-tree with ../.device* linked in and
#   .site -> ../.site: carry .device23 + .device-wheels-a (`unpack`); .device23-mc + .device-wheels-b
#   (RELEASE=023 PAYLOAD=.device23 SPEC=080 `spec-layer0`); .device24 (RELEASE=024 PAYLOAD=.device24 SPEC=080
#   `spec-layer0`); .device26 (RELEASE=026 PAYLOAD=.device26 LAYER0_COMPILED=1 `layer0`).
# PHASE `new-probes` (issue 32, 2026-12-03): the 0.9.0 server cell with the variants llama-every_layer_id and
#   llama-fp8_kv (probes every_layer_id, kv_cache_fp8);
# PHASE `families` (issue 32, 2026-12-03, third session): the 0.9.0 server cell with the probe-set-2 variants
#   qwen3_moe and qwen2_5_vl (probes layer_ids_qwen3_moe, vlm_text_layer_ids; the MoE needs the payload's
#   vllm/_moe_C*.so, so that payload keeps it), then `layer0` where LAYER0_MODES is set (LAYER0_SECONDS kept for it).
#   From 2026-12-03 (third session) the calls carry whole payloads: published/ and reports/ (40 MB tracked) are
#   moved out of the working tree for the calls' duration, so the tree that travels is ~4 MB.
# PHASE `image` (issue 32, 2026-12-03, fourth session): the 0.9.0 server cell with the variant qwen2_5_vl, which
#   now also sends the seeded image (probe vlm_image_layer_ids). Two invocations share one call with BUDGET set.
# PHASE `id-families` (issue 32, fourth session): bench/layer_id_zero.py with every id at once (`--ids all`) for each
#   of ID_FAMILIES (default deepseek_v3 qwen3_moe), then the tiny Llama with each of ID_EACH alone (e.g. "0 3 6").
# PHASE `cell-ids` (issue 32, sixth session): the 0.9.0 server cell with NEW_VARIANTS (e.g.
#   deepseek_v3-every_layer_id: the probe through the harness, not the bench), leaving IDS_SECONDS, then each
#   FAMILY:ID of ID_EACH alone through bench/layer_id_zero.py (e.g. "llama:1 llama:2 qwen3_moe:3").
# speculators 0.5.0 (2026-12-04, eighth session): SPEC=050 `llama-spec` with $PAYLOAD-mc/s050/ holding speculators 0.5.0
#   and what its pins need ahead of the image's (transformers==5.6.2 tokenizers==0.22.2 datasets==4.8.4; pip download
#   --no-deps), 11 MB: call 1 carries .device24 (`unpack`), call 2 .device24-mc.
# PHASE `llama-spec`: the server cell with no variant x speculators $SPEC; `llama-specs`: the same for each of
#   $SPECS in turn (the time left shared out; issue 29, 2026-12-03: SPECS="0601 0701", the module-client releases); `layer0`: bench/layer_id_zero.py
#   (issue 32: what extract_hidden_states saves for aux id 0, offline LLM, the tiny Llama in float32) over the
#   release's site, eager (LAYER0_COMPILED=1: compiled too); `spec-layer0`: `llama-spec`, then `layer0`.
# Results and logs come back as $OUT/PHASE.tgz (a result, runner/probe/server logs, machine.txt).
set -uo pipefail
phase=${1:?mla, rest or dry}
# RELEASE (default 026) names the unpacked site and the labels; PAYLOAD (default .device) the carried
# payload, whose FlashAttention part is $PAYLOAD-fa3 (another release: ../shared/tools/device-payload 0.25.0 .device25 ...).
release=${RELEASE:-026}; payload=${PAYLOAD:-.device}
# SPEC (e.g. 080) names a speculators release installed beside the payload's (.site/s$SPEC, first on PYTHONPATH)
spec=${SPEC:-081}
root=$(pwd); out=${OUT:-/tmp/out}; site=$root/.site/v$release; s0401=$root/.site/s0401; res=$root/.res/$phase
common=$root/.site/common
began=$(date +%s)
mkdir -p "$site" "$s0401" "$res" "$root/.site/tvshim"
# the release-independent wheels, carried apart when a payload and its wheels exceed one call (.device-wheels-*/):
# installed once into .site/common, which follows the release's site on PYTHONPATH
for d in "$root"/.device-wheels*/; do
  [ -d "$d" ] && ls "$d"*.whl >/dev/null 2>&1 || continue
  mkdir -p "$common"
  stamp=$common/.wheels-$(ls "$d" | md5sum | cut -c1-12)
  [ -f "$stamp" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$common" \
                         "$d"*.whl && touch "$stamp"; } || exit 3
done
# a payload split over calls (the checkout, 43 MiB on 2026-12-03, and a whole payload exceed 64 MiB):
# split -n 3 -d .deviceNN/vllm.tar.xz into .deviceNN-p1/ .deviceNN-p2/ .deviceNN-p3/ (vllm.tar.xz.part-*);
# every call stashes the parts it carried in .site/stash/ (a warm machine keeps .site/), phase `stash` stops
# there, and the release's site is unpacked from the parts once the phase runs with PAYLOAD=.deviceNN
for d in "$root"/.device*-p[0-9]/; do
  [ -d "$d" ] || continue
  mkdir -p "$root/.site/stash/$(basename "$d")" && cp "$d"vllm.tar.xz.part-* "$root/.site/stash/$(basename "$d")/"
done
if [ "$phase" = stash ]; then ls -laR "$root/.site/stash"; exit 0; fi
if [ -d "$root/$payload/wheels" ]; then  # (again) whenever the carried wheels changed: a warm machine keeps .site/
  stamp=$site/.wheels-$(ls "$root/$payload/wheels" | md5sum | cut -c1-12)
  [ -f "$stamp" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" \
                         "$root"/$payload/wheels/*.whl && touch "$stamp"; } || exit 3
fi
# a second carried folder, $payload-mc (mistral_common and its deps: 0.23.0's `vllm serve` imports it; over
# 64 MiB with the payload, so it travels in the next call while .site/ stays on the warm machine)
if [ -d "$root/$payload-mc/wheels" ]; then
  stamp=$site/.mc-$(ls "$root/$payload-mc/wheels" | md5sum | cut -c1-12)
  [ -f "$stamp" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" \
                         "$root"/$payload-mc/wheels/*.whl && touch "$stamp"; } || exit 3
fi
# speculators $SPEC (0.8.1, 0.8.0) + its hs-connectors beside the payload's 0.9.0 (s$SPEC/ of either carried folder);
# SPECS="0601 0701": several releases, each in its own .site/sNNNN (phase `llama-specs`)
for one in $spec ${SPECS:-}; do
  for d in "$root/$payload/s$one" "$root/$payload-mc/s$one"; do
    if [ ! -d "$root/.site/s$one/speculators" ] && ls "$d"/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$root/.site/s$one" "$d"/*.whl || exit 3
    fi
  done
done
sspec=$root/.site/s$spec
# the release's own site, then the shared wheels (where carried apart), then the datasets shim
base=$site; [ -d "$common" ] && base=$base:$common; base=$base:$root/.site/tvshim
if [ ! -d "$site/vllm" ]; then
  if [ -f "$root/$payload/vllm.tar.xz" ]; then
    tar -xJf "$root/$payload/vllm.tar.xz" -C "$site" || exit 3
  else
    cat "$root/.site/stash/$(basename "$payload")"-p*/vllm.tar.xz.part-* | tar -xJ -C "$site" || exit 3
  fi
fi
if [ -f "$root/$payload-fa3/fa3.tar.xz" ] && [ ! -f "$site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" ]; then
  tar -xJf "$root/$payload-fa3/fa3.tar.xz" -C "$site" || exit 3
fi
if [ ! -d "$s0401/speculators" ] && ls "$root"/$payload/s0401/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$s0401" "$root"/$payload/s0401/*.whl || exit 3
fi
# datasets <= 5.1 x torchvision 0.26: see tvshim/sitecustomize.py (prepare-data only)
cp "$root/.github/gpu/tvshim/sitecustomize.py" "$root/.site/tvshim/"
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
{ date -u; nvidia-smi; python3 -V; python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|transformers|tokenizers) ';
  PYTHONPATH=$base python3 -c 'from importlib.metadata import version as v; print("vllm", v("vllm"))';
  PYTHONPATH=$sspec:$base python3 -c 'from importlib.metadata import version as v
print("speculators", v("speculators"), "hs-connectors", v("hs-connectors"))';
  ls -la "$site/vllm/vllm_flash_attn/"; } > "$res/machine.txt" 2>&1
cell() {  # label pythonpath timeout [variants]
  local label=$1 pp=$2 limit=$3 variants=${4-}
  local start; start=$(date +%s)
  if [ "$phase" = dry ]; then echo "would run $label: PYTHONPATH=$pp --variants=$variants timeout $limit"; return; fi
  PYTHONPATH=$pp python3 -m compat run --python "$(command -v python3)" --dtype float32 --gpu-memory-utilization 0.8 \
    ${variants:+--variants "$variants"} \
    --cell-timeout "$limit" --results "$res/$label/results" --reports "$res/$label/reports" > "$res/$label.runner.log" 2>&1
  echo "$label exit $? in $(( $(date +%s) - start ))s" >> "$res/timings.txt"
}
left() { echo $(( ${BUDGET:-560} - $(date +%s) + began )); }  # BUDGET: seconds this invocation may use (two in one call)
layer0() {  # bench/layer_id_zero.py over the release's site: eager, and compiled where LAYER0_COMPILED=1;
  # LAYER0_MODES picks others: inproc (the engine in the bench's process), copy (that, with the repair
  # compat/worker/aux_capture_copy.py applied)
  local mode start
  for mode in ${LAYER0_MODES:-eager ${LAYER0_COMPILED:+compiled}}; do
    start=$(date +%s)
    if [ "$phase" = dry ]; then echo "would run layer0 $mode: PYTHONPATH=$base"; continue; fi
    # TRITON_F32_DEFAULT=ieee as the harness sets it for a cell (float32 attention without TF32)
    TRITON_F32_DEFAULT=ieee PYTHONPATH=$base timeout "$(( $(left) > 60 ? $(left) : 60 ))" \
      python3 bench/layer_id_zero.py --model-cache "$root/.site/models" \
      ${LAYER0_IDS:+--ids "$LAYER0_IDS"} $([ "$mode" = compiled ] && echo --compiled) \
      $([ "$mode" = inproc ] && echo --in-process) $([ "$mode" = copy ] && echo --copy-id0) \
      --json "$res/layer0-v$release-$mode.json" > "$res/layer0-v$release-$mode.log" 2>&1
    echo "layer0-v$release-$mode exit $? in $(( $(date +%s) - start ))s" >> "$res/timings.txt"
  done
}
idbench() {  # family ids label [seconds]: bench/layer_id_zero.py once, eager, the engine in its own process,
  # for `seconds` (default: the time left); with under 60 s it does not start and says so in timings.txt
  local start limit=${4:-$(left)}; start=$(date +%s)
  if [ "$phase" = dry ]; then echo "would run idbench $1 $2 for ${limit}s"; return; fi
  if [ "$limit" -lt 60 ]; then echo "id-v$release-$3 not run: ${limit}s of BUDGET left" >> "$res/timings.txt"; return; fi
  TRITON_F32_DEFAULT=ieee PYTHONPATH=$base timeout "$limit" \
    python3 bench/layer_id_zero.py --model-cache "$root/.site/models" --family "$1" --ids "$2" \
    --json "$res/id-v$release-$3.json" > "$res/id-v$release-$3.log" 2>&1
  echo "id-v$release-$3 exit $? in $(( $(date +%s) - start ))s" >> "$res/timings.txt"
}
each_alone() {  # each FAMILY:ID of ID_EACH asked alone (a bare ID: the tiny Llama's), the time left shared out
  local one family n i=0
  n=$(echo ${ID_EACH:-} | wc -w)
  for one in ${ID_EACH:-}; do
    i=$((i + 1)); family=llama; [[ $one == *:* ]] && family=${one%%:*}
    idbench "$family" "${one##*:}" "$family-${one##*:}-alone" $(( $(left) / (n - i + 1) ))
  done
}
case $phase in
  id-families) for family in ${ID_FAMILIES:-deepseek_v3 qwen3_moe}; do idbench "$family" all "$family-all"; done
               each_alone ;;
  cell-ids) : "${NEW_VARIANTS:?cell-ids: set NEW_VARIANTS (comma-separated variants), else the cell serves them all}"
            cell v$release-s090-$(echo "$NEW_VARIANTS" | tr , +) "$base" $(( $(left) - ${IDS_SECONDS:-0} )) "$NEW_VARIANTS"
            each_alone ;;
  mla) cell v$release-s090-mla-bf16 "$base" "$(left)" deepseek_v3,llama-bfloat16 ;;
  rest) cell v$release-s090-v2-hybrid "$base" 350 hybrid,llama-runner_v2
        cell v$release-s0401-inprocess "$s0401:$site" "$(left)" ;;
  server-rest) cell v$release-s090-v2-hybrid "$base" 420 hybrid,llama-runner_v2 ;;
  llama) cell v$release-s090-llama "$base" "$(left)" none ;;
  llama081|llama-spec) cell v$release-s$spec-llama "$sspec:$base" "$(left)" none ;;
  llama-specs) n=$(echo $SPECS | wc -w); i=0
               for one in $SPECS; do i=$((i + 1))
                 cell v$release-s$one-llama "$root/.site/s$one:$base" $(( $(left) / (n - i + 1) )) none
               done ;;
  llama-both) cell v$release-s090-llama "$base" 280 none
              cell v$release-s$spec-llama "$sspec:$base" "$(left)" none ;;
  new-probes) cell v$release-s090-every-id-fp8 "$base" "$(left)" ${NEW_VARIANTS:-llama-every_layer_id,llama-fp8_kv} ;;
  families) cell v$release-s090-families "$base" $(( $(left) - ${LAYER0_SECONDS:-0} )) qwen3_moe,qwen2_5_vl
            [ -n "${LAYER0_MODES:-}" ] && layer0 ;;
  layer0) layer0 ;;
  image) cell v$release-s090-vlm-image "$base" "$(left)" qwen2_5_vl ;;
  spec-layer0) cell v$release-s$spec-llama "$sspec:$base" $(( $(left) - ${LAYER0_SECONDS:-150} )) none
               layer0 ;;
  unpack) ;;
  hybrid-bf16) cell v$release-s090-hybrid-bf16 "$base" "$(left)" hybrid,llama-bfloat16 ;;
  dry) cell v$release-s090-mla-bf16 "$base" "$(left)" deepseek_v3,llama-bfloat16
       cell v$release-s0401-inprocess "$s0401:$site" "$(left)"
       PYTHONPATH=$s0401:$site python3 -c 'import speculators; print("in-process speculators", speculators.__version__)' ;;
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
cat "$res/timings.txt" 2>/dev/null
tar -C "$root/.res" -czf "$out/$phase.tgz" "$phase"
ls -la "$out"
