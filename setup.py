"""Only for the optional cffi extension; everything else is in pyproject.toml.

The extension (eventstore/sign_batch.c) only makes signing faster: without it the journal signs
through PyNaCl with byte-identical signatures. It is built as an optional extension, so a machine
without a C compiler or Python headers still installs (pip shows the compiler's failure as a
warning), and AGENT_NODE_NO_EXTENSION=1 skips it on purpose (docs/operations.md).
"""

import os

from setuptools import setup

skip = os.environ.get("AGENT_NODE_NO_EXTENSION", "").strip().lower() not in ("", "0", "false", "no")
setup(cffi_modules=[] if skip else ["eventstore/sign_batch_build.py:ffibuilder"])
