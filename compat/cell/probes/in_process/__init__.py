"""The in-process probes (speculators <= 0.4): vLLM's internals built and driven the way the release's own
generator drives them."""
