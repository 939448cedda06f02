"""Wait until this node's copy of a journal holds everything the mesh's stream holds of it.

A node that is about to become an agent's home (a takeover, a handoff, a start) must first
hold every envelope the old home got acknowledged: else it would write after a gap, or fork
from an acknowledged write. The stream's last message on each placement node's subject for the
journal names, in its message id, the last seq it carries (node/sync/nats_subjects.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from node.context import NodeContext
from node.ops.polling import DeadlineExceeded, until
from node.sync.nats_subjects import MSG_ID_HEADER, seq_of_msg_id, stream_name, subject
from projections.journals import Journals

CATCH_UP_POLL_SECS = 0.05
GET_TIMEOUT_SECS = 2.0


async def stream_holds(
    js: JetStreamContext, mesh: str, journal: str, writers: Iterable[str]
) -> int:
    """The highest seq of `journal` the stream holds on the subjects of `writers` (0: none)."""
    best = 0
    for node in writers:
        try:
            last = await asyncio.wait_for(
                js.get_last_msg(stream_name(mesh), subject(mesh, node, journal)),
                GET_TIMEOUT_SECS,
            )
        except NotFoundError:
            continue
        best = max(best, seq_of_msg_id((last.headers or {}).get(MSG_ID_HEADER, "")) or 0)
    return best


async def caught_up(
    ctx: NodeContext, js: JetStreamContext, journal: str, writers: Iterable[str], deadline: float
) -> bool:
    """True once the local head of `journal` reaches what the stream holds; False when
    `deadline` (time.monotonic()) passes first."""
    want = await stream_holds(js, ctx.config.mesh.name, journal, writers)
    heads = ctx.projections.get(Journals).head
    try:
        await until(
            lambda: heads.get(journal, 0) >= want,
            max(0.0, deadline - time.monotonic()),
            f"{journal} caught up with the stream",
            CATCH_UP_POLL_SECS,
        )
    except DeadlineExceeded:
        return False
    return True
