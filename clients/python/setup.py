"""The stubs are generated into the build, not kept in the source tree."""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_stubs import generate


class BuildWithStubs(build_py):
    def run(self) -> None:
        super().run()
        generate(Path(self.build_lib) / "recserve_client" / "_proto")


setup(cmdclass={"build_py": BuildWithStubs})
