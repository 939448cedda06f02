"""Only for the cffi extension; everything else is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["eventstore/sign_batch_build.py:ffibuilder"])
