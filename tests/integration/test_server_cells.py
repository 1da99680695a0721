"""What the server-era cells must find (speculators >= 0.5 drives `vllm serve` with
extract_hidden_states + ExampleHiddenStatesConnector; measured on these machines)."""

from conftest import probes_by_key

FILE_PROBES = [("payload_schema", None), ("write_completion", None), ("layer_numbering", None),
               ("hidden_states_match_reference", "batch"), ("hidden_states_match_reference", "repeated"),
               ("hidden_states_match_reference", "shared_prefix")]


def test_newest_pair_matches_the_reference_with_the_cpu_connector_shim(cell):
    record = cell("0.32.0", "0.9.0")
    probes = probes_by_key(record)
    assert probes[("extract_hidden_states_method", None)]["status"] == "ok"
    assert probes[("hidden_states_connector", None)]["status"] == "ok"
    for key in FILE_PROBES:
        # As shipped, the connector's write path needs CUDA (pinned memory, streams): broken on CPU.
        assert probes[key]["status"] == "broken", (key, probes[key]["status"], probes[key]["reason"])
        assert probes[key]["with_compat"] == "ok", (key, probes[key]["detail"].get("with_compat"))
    assert "cpu_hidden_states_connector" in {s["id"] for s in record["env_shims"]}
    assert record["verdict"] == "compatible-with-compat"


def test_022_refuses_chunked_prefill_and_works_without_prefix_caching(cell):
    """0.22.x refuses the connector with chunked prefill; with it off, the connector writes only
    the rows it computed (prefix-cached tokens go missing: 72 of 200 rows, measured), so the
    with_compat server also runs with --no-enable-prefix-caching, and then every file matches."""
    record = cell("0.22.1", "0.8.1")
    probes = probes_by_key(record)
    for key in FILE_PROBES:
        assert probes[key]["status"] == "broken", (key, probes[key]["status"], probes[key]["reason"])
        assert "does not support chunked prefill" in probes[key]["error"]["message"]
        assert probes[key]["with_compat"] == "ok", (key, probes[key]["detail"].get("with_compat"))
    serve_args = probes[("payload_schema", None)]["detail"]["with_compat"]["detail"]["run"]["serve_args"]
    assert "--no-enable-chunked-prefill" in serve_args and "--no-enable-prefix-caching" in serve_args
    assert record["verdict"] == "compatible-with-compat"
