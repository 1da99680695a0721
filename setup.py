"""The published table ships inside the wheel (pyproject.toml holds everything else).

`pip install .` / `uv tool install .` copy published/support.json and published/results/ (every record
and row document `vllm-spec-compat check` reads) into compat/published/ in the build, so an installed
command answers offline (compat.harness.published.PACKAGED), and fixtures/*.json beside the compat
package, where compat.fixtures.data reads them. An editable install reads the checkout's folders.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithPublishedTable(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # the checkout's published/ is read in place
            return
        source, target = HERE / "published", Path(self.build_lib) / "compat" / "published"
        if not (source / "results" / "support").is_dir():
            raise SystemExit(f"{source}: no published table to package (results/support/ missing)")
        shutil.rmtree(target, ignore_errors=True)
        (target / "results" / "support").mkdir(parents=True)
        shutil.copyfile(source / "support.json", target / "support.json")
        for path in sorted((source / "results").glob("*.json*")):  # <cell-id>.json.gz (a plain .json reads too)
            shutil.copyfile(path, target / "results" / path.name)
        for path in sorted((source / "results" / "support").glob("*.json")):
            shutil.copyfile(path, target / "results" / "support" / path.name)
        # the fixtures' data (prompts, tiny model configs): deciding a record's verdict again can read them, and
        # compat.fixtures.data looks for them beside the compat package
        fixtures = Path(self.build_lib) / "fixtures"
        shutil.rmtree(fixtures, ignore_errors=True)
        fixtures.mkdir()
        for path in sorted((HERE / "fixtures").glob("*.json")):
            shutil.copyfile(path, fixtures / path.name)


setup(cmdclass={"build_py": BuildWithPublishedTable})
