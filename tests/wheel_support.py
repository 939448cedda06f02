"""The package as a pip-only user gets it: a wheel built from a copy of this checkout where no C
compiler exists, installed into a folder of its own. Built once per session (the `pure_wheel`
fixture of tests/conftest.py): each build is seconds of pip, and the tests of the install
without the signing extension, of the docs in the wheel and of the authoring kit's templates
all read the same wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tests.support import ROOT


@dataclass(frozen=True)
class PureWheel:
    wheel: Path
    build_log: str  # pip's verbose output: says why the optional extension was not built
    site: Path  # the wheel installed alone (pip install --no-deps -t)
    env: dict[str, str]  # no compiler on PATH, CC pointing nowhere

    @property
    def python_path(self) -> str:
        """PYTHONPATH for `python -S`: the installed wheel first, then this venv's dependencies
        (-S: no .pth files, so the dev install's editable finder cannot answer instead)."""
        return f"{self.site}{os.pathsep}{sysconfig.get_paths()['purelib']}"


def build_pure_wheel(workdir: Path) -> PureWheel:
    source = workdir / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "tests", "agents", "bench", ".cache", "build", "node_modules",
            "data", "*.so", "*.egg-info",
        ),
    )  # fmt: skip
    env = {
        **os.environ,
        "CC": "/nonexistent/cc",
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin/nonexistent",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("PYTHONPATH", None)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(workdir / "w"), "."],
        cwd=source,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (workdir / "w").glob("agent_node-*.whl")
    site = workdir / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-t", str(site), str(wheel)],
        check=True,
        capture_output=True,
        env=env,
        timeout=300,
    )
    return PureWheel(wheel, built.stdout + built.stderr, site, env)
