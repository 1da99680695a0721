"""The server-era probes (speculators >= 0.5): a real `vllm serve` per mode, and the release's own client
against it."""
