"""Entry point kept for `python -m compat.kimi`; the code is compat.harness.kimi."""

import sys

from compat.harness.kimi import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
