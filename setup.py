"""The package's build step beyond pyproject.toml: an installed circuitloc (`pip install .`, not
editable) carries the embedded default config, its schema and the tasks' resources under
circuitloc/_shipped/ (circuitloc.shipped finds them there), copied from the checkout's config/ and
resources/ when the wheel is built. A checkout or an editable install reads the checkout's own."""

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))
from circuitloc.shipped import FILES  # noqa: E402  (standard library only: no dependency needed to build)


class BuildWithShipped(build_py):
    """build_py, then config/ and resources/ copied into the built package (not for an editable
    install, which reads the checkout's)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "circuitloc" / "_shipped"
        for name in FILES:
            src, out = HERE / name, dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, out, dirs_exist_ok=True)
            else:
                shutil.copy2(src, out)


setup(cmdclass={"build_py": BuildWithShipped})
