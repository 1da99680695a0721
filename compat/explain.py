"""Entry point kept for `python -m compat.explain`; the code is compat.harness.explain."""

import sys

from compat.harness.explain import main

if __name__ == "__main__":
    sys.exit(main())
