"""`python -m compat COMMAND ...`: the same command as the installed `vllm-spec-compat` (compat.harness.cli)."""

import sys

from compat.harness.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
