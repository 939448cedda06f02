"""Only for the optional cffi extension; everything else is in pyproject.toml.

The extension (eventstore/sign_batch.c) only makes signing faster: without it the journal signs
through PyNaCl with byte-identical signatures. It is built as an optional extension, so a machine
without a C compiler or Python headers still installs (pip shows the compiler's failure as a
warning), and AGENT_NODE_NO_EXTENSION=1 skips it on purpose (docs/operations.md).
"""

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# docs/ ships inside the package (node/docs/), for `agent-node docs` (node/cli/docs.py)
DOCS = Path(__file__).resolve().parent / "docs"


class build_py_with_docs(build_py):
    """build_py, plus docs/**/*.md copied to node/docs/ in the build (one copy in git)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "node" / "docs"
        for source in sorted(DOCS.rglob("*.md")):
            destination = target / source.relative_to(DOCS)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)


skip = os.environ.get("AGENT_NODE_NO_EXTENSION", "").strip().lower() not in ("", "0", "false", "no")
setup(
    cffi_modules=[] if skip else ["eventstore/sign_batch_build.py:ffibuilder"],
    cmdclass={"build_py": build_py_with_docs},
)
