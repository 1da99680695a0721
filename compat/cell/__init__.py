"""The cell side: what runs inside a cell's venv, beside the pinned vLLM and speculators; it needs nothing of the
harness."""
