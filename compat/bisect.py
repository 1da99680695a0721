"""Entry point for `python -m compat.bisect`; the code is compat.harness.bisect_cli."""

import sys

from compat.harness.bisect_cli import main

if __name__ == "__main__":
    sys.exit(main())
