"""Command line: `python -m compat run|check|publish|refresh ...` (compat.harness.run_command.command)."""

import sys

from compat.harness.run_command import command

if __name__ == "__main__":
    sys.exit(command(sys.argv[1:]))
