"""Entry point for `python -m compat.bisect`; the code is compat.harness.bisect."""

import sys

from compat.harness.bisect import main

if __name__ == "__main__":
    sys.exit(main())
