"""What the server-era cells must find (speculators >= 0.5 drives `vllm serve` with
extract_hidden_states + ExampleHiddenStatesConnector; measured on these machines)."""

from conftest import probes_by_key

FILE_PROBES = [("payload_schema", None), ("write_completion", None), ("layer_numbering", None),
               ("hidden_states_match_reference", "batch"), ("hidden_states_match_reference", "repeated"),
               ("hidden_states_match_reference", "shared_prefix")]


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
    assert "cpu_hidden_states_connector" in {s["id"] for s in record["env_shims"]}
    assert record["verdict"] == "compatible"


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
        behind = probes[("hidden_states_match_reference", case)]["detail"]["api_only"]
        assert behind["status"] == "broken", (case, behind)
        assert behind["breakage"] == "connector_prefix_cache_rows", (case, behind)
    assert probes[("hidden_states_match_reference", "batch")]["detail"]["api_only"]["status"] == "ok"
    flags = probes[("payload_schema", None)]["detail"]["with_compat"]["detail"]["run"]["flags"]
    assert "does not support chunked prefill" in flags["--no-enable-chunked-prefill"]
    assert "rows missing on prefix-cached prompts" in flags["--no-enable-prefix-caching"]
    assert "cpu_hidden_states_connector" in {s["id"] for s in record["env_shims"]}
    assert record["verdict"] == "compatible-with-compat"
