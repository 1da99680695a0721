"""The worker side: what vLLM loads into its own worker processes (worker extensions, the adapters' worker half,
CPU shims); it imports nothing of the harness or the cell."""
