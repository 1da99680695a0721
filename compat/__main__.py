"""Command line: `python -m compat run [...]` (what `nox -s compat` calls)."""

import sys

from compat.harness.run_command import main

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        sys.exit(main(sys.argv[2:]))
    sys.exit("usage: python -m compat run [--vllm V ... --speculators S ...] [--list-cells] [--reinstall]")
