"""Entry point kept for `python -m compat.report_cli`; the code is compat.harness.report_cli."""

import sys

from compat.harness.report_cli import main

if __name__ == "__main__":
    sys.exit(main())
