"""The gated Kimi-K2.5 suite (`nox -s kimi`), in its own pytest session: checks of one shared extraction run."""
