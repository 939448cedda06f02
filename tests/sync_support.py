"""The mesh sync tests' helpers: they live in harness/mesh.py, which the benches use too."""

from __future__ import annotations

from harness.mesh import SYNC_TUNING as SYNC_TUNING
from harness.mesh import peer_token as peer_token
from harness.mesh import peer_toml as peer_toml
from harness.mesh import prefill as prefill
from harness.mesh import signed_chain as signed_chain
from harness.mesh import write_mesh as write_mesh
