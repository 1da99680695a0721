"""speculators' CLI (0.8+) in one resident process: its app imported once, each command (prepare-data,
generate-offline-data) then called as the `speculators` script calls it, in turn, each with its own log.

`python -m compat.cell.speculators_cli` reads one JSON command a line on stdin, {"argv": [...], "log": PATH},
runs `app(argv)` with file descriptors 1 and 2 on that log, and answers {"code": N} a line on stdout: N is
the exit status the script would have had (its SystemExit; 1 with the traceback in the log for an exception
it lets out). A separate process per command spends most of its time importing torch and speculators
(16-20 s of a 17-20 s case on two cores); the commands themselves do not share state that the probes judge:
every case reads its own prepared data and writes its own output folder.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable


def speculators_app() -> Callable[..., Any]:
    """What the `speculators` console script calls (its entry point, read from the installed metadata)."""
    found = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "speculators"]
    if not found:
        raise LookupError("the installed speculators declares no `speculators` console script")
    return found[0].load()  # type: ignore[no-any-return]


def run(app: Callable[..., Any], argv: list[str], log: Path) -> int:
    """One command, as the script runs it (`sys.exit(app())`), its output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        handle.write(f"$ speculators {' '.join(argv)}   (in the resident process {os.getpid()})\n")
        handle.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            app(args=list(argv), prog_name="speculators")
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, (int, type(None))):
                print(exit_.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the script would die with this traceback: so does the command
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return code


def main() -> int:
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints between commands do not break the answers
    app = speculators_app()
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        answers.write(json.dumps({"code": run(app, command["argv"], Path(command["log"]))}) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
