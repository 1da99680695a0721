"""What a server-era speculators release (>= 0.5) passes to `vllm serve`, checked against the
release's argument parser (the `EngineArgs` fields its flags are generated from) and config classes.

The launch script (`scripts/launch_vllm.py`) is a repository script, in no wheel, so its
arguments are written down here as the harness's server cells run them
(compat/cell/extraction.py `serve_args`, which the cell side owns): `--speculative_config` and
`--kv_transfer_config` with the JSON below, and `--no-enable-chunked-prefill` from 0.6 to 0.7.x.
"""

from __future__ import annotations

from packaging.version import Version

from compat.harness.static.api import Api
from compat.harness.static.finding import Finding
from compat.harness.static.uses import Use

LAUNCH = "scripts/launch_vllm.py (repository script, as compat/cell/extraction.py runs it)"
ENGINE_ARGS = "vllm.engine.arg_utils.EngineArgs"
CONFIG_CLASSES = {"speculative_config": "vllm.config.SpeculativeConfig",
                  "kv_transfer_config": "vllm.config.KVTransferConfig"}
SPECULATIVE = {"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {}}
TRANSFER = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {}}
# a value that must be one vLLM knows: where vLLM lists the accepted ones
VALUE_HOMES = {"speculative_config.method": "vllm/config/speculative.py",
               "kv_transfer_config.kv_connector": "vllm/distributed/kv_transfer/kv_connector/factory.py"}


def serve_uses(speculators: str) -> list[Use]:
    version = Version(speculators)
    if version < Version("0.5"):
        return []
    flags = ["--speculative_config", "--kv_transfer_config"]
    if Version("0.6") <= version < Version("0.8"):
        flags.append("--no-enable-chunked-prefill")
    uses = [Use("flag", flag, LAUNCH, 0, dist="speculators") for flag in flags]
    for option, keys in (("speculative_config", SPECULATIVE), ("kv_transfer_config", TRANSFER)):
        for key, value in keys.items():
            homed = isinstance(value, str) and f"{option}.{key}" in VALUE_HOMES
            target = f"{option}.{key}" + (f"={value}" if homed else "")
            uses.append(Use("config-key", target, LAUNCH, 0, dist="speculators"))
    return uses


def _fields(api: Api, dotted: str) -> tuple[set[str] | None, str]:
    found = api.lookup(dotted)
    signature = api.signature(found) if found.kind == "class" else None
    if signature is None:
        return None, found.where
    return {p.name for p in signature.params}, f"{signature.file}:{signature.line}"


def check_serve(use: Use, api: Api) -> Finding:
    if use.kind == "flag":
        name = use.target.lstrip("-").replace("-", "_")
        field = name[3:] if name.startswith("no_") else name
        fields, where = _fields(api, ENGINE_ARGS)
        if fields is None:
            return Finding(use, "unknown", f"{ENGINE_ARGS} not readable", where)
        if field not in fields:
            return Finding(use, "broken", f"`vllm serve` has no {use.target}: EngineArgs has no field {field}", where)
        return Finding(use, "ok", "ok", where)
    option, _, rest = use.target.partition(".")
    key, _, value = rest.partition("=")
    fields, where = _fields(api, CONFIG_CLASSES[option])
    if fields is None:
        return Finding(use, "unknown", f"{CONFIG_CLASSES[option]} not readable", where)
    if key not in fields:
        return Finding(use, "broken", f"{CONFIG_CLASSES[option].rsplit('.', 1)[-1]} has no field {key}", where)
    if value:
        home = VALUE_HOMES[f"{option}.{key}"]
        text = api.sources.read(home) if home in api.sources.paths else ""
        if f'"{value}"' not in text and f"'{value}'" not in text:
            return Finding(use, "broken", f"{value!r} is not a value vLLM accepts for {key} ({home} does not name it)",
                           home)
    return Finding(use, "ok", "ok", where)
