"""Command line: `python -m compat run [...]` (what `nox -s compat` calls), `python -m compat check
--speculators S --vllm V` (one pair, from the published table), `python -m compat publish [--add DIR]`
(the published table's generated files), `python -m compat refresh` (what the table lacks)."""

import sys

USAGE = ("usage: python -m compat run [--vllm V ... --speculators S ...] [--list-cells] [--reinstall]\n"
         "       python -m compat check --speculators S --vllm V [--json]\n"
         "       python -m compat publish [--add RESULTS_DIR ...]\n"
         "       python -m compat refresh [--json]")

if __name__ == "__main__":
    command, argv = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "run":
        from compat.harness.run_command import main

        sys.exit(main(argv))
    if command == "check":
        from compat.harness.published import check_main

        sys.exit(check_main(argv))
    if command == "refresh":
        from compat.harness.refresh import main as refresh_main

        sys.exit(refresh_main(argv))
    if command == "publish":
        from compat.harness.published import main as publish_main

        sys.exit(publish_main(argv))
    print(USAGE, file=sys.stderr)
    sys.exit(2)
