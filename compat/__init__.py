"""vllm-spec-compat: does speculators' hidden-state extraction still work on this vLLM?"""
