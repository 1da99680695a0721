"""The harness side, in its own environment: it picks, installs and runs the cells, then decides, keeps and
reports them; it never imports vLLM, speculators, torch or transformers."""
