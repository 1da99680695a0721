"""The lines a cell's processes executed, read from their coverage data (compat.harness.executed): run in the
cell's interpreter, which has coverage, as `python -m compat.cell.executed_lines DATA_DIR`; prints one JSON
object {absolute file: [line, ...]}. The parallel data files are combined into one first (kept: a second read
gives the same lines).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    import coverage

    data_dir = Path(sys.argv[1])
    measured = coverage.Coverage(data_file=str(data_dir / ".coverage"), config_file=False)
    if list(data_dir.glob(".coverage.*")):
        measured.combine([str(data_dir)], keep=True)
    data = measured.get_data()
    print(json.dumps({file: sorted(data.lines(file) or []) for file in data.measured_files()}))


if __name__ == "__main__":
    main()
