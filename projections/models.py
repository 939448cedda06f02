"""Every read model the node keeps, and where it lives: the one list (docs/design.md,
"Projections").

`disk`: grows with history; LMDB, folded by the journal's writer inside the transaction of the
envelopes it folds (projections/disk.py). `memory`: bounded by live state; the heap, folded on
the event loop after each commit and checkpointed (projections/base.py). The node builds both
kinds from this list and nowhere else, so adding a read model is one line here; its areas find
it with `Projections.get(cls)`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from projections.base import Projection, Projections
from projections.call_records import OpenRuns
from projections.deployments import DeployedAgents
from projections.disk import DiskModel, DiskModels
from projections.entries import Findings, Logs
from projections.grants import Grants
from projections.inference_ledger import InferenceLedger
from projections.journals import Journals
from projections.keys import KeyHistory
from projections.ownership import Owners
from projections.packages import Registry
from projections.peers import PeerBook
from projections.placements import Placements
from projections.tasks import Tasks
from projections.usage import Usage


class Storage(StrEnum):
    DISK = "disk"
    MEMORY = "memory"


class ReadModel(NamedTuple):
    kind: type
    storage: Storage


# Tasks holds the approvals' tables too (`Tasks.approvals`, found by `Projections.get(Approvals)`):
# one state machine decides both (projections/states.py).
# In folding order within each kind: `owners` first, since the ownership rule it keeps guards
# the folds of the models after it.
READ_MODELS: tuple[ReadModel, ...] = (
    ReadModel(Owners, Storage.DISK),
    ReadModel(Logs, Storage.DISK),
    ReadModel(Findings, Storage.DISK),
    ReadModel(Tasks, Storage.DISK),
    ReadModel(InferenceLedger, Storage.DISK),  # inference budgets (issue 54)
    ReadModel(OpenRuns, Storage.DISK),  # interrupted runs' recorded calls (issue 53)
    ReadModel(Journals, Storage.MEMORY),
    ReadModel(KeyHistory, Storage.MEMORY),
    ReadModel(Registry, Storage.MEMORY),
    ReadModel(Grants, Storage.MEMORY),
    ReadModel(PeerBook, Storage.MEMORY),
    ReadModel(DeployedAgents, Storage.MEMORY),
    ReadModel(Placements, Storage.MEMORY),
    ReadModel(Usage, Storage.MEMORY),  # inference (issue 54)
)


def disk_models() -> DiskModels:
    """Fresh instances of the on-disk models, to attach to a journal (`EventStore(indexer=)`)."""
    models: list[DiskModel] = [m.kind() for m in READ_MODELS if m.storage is Storage.DISK]
    return DiskModels(models)


def node_projections(disk: DiskModels) -> Projections:
    """Fresh instances of the in-memory models, next to the on-disk ones of `disk`."""
    memory: list[Projection] = [m.kind() for m in READ_MODELS if m.storage is Storage.MEMORY]
    return Projections(memory, disk)
