"""POST /agui/{agent}: an AG-UI 1.0 run of one hosted agent, streamed as SSE.

Thin: decode the RunAgentInput (a bad one is a 400 before the stream opens), then write what
the run service yields. Needs `operate`: a run starts work and may decide approvals.
"""

from __future__ import annotations

import logging

from aiohttp import web

from node.agui.events import RunEvents
from node.agui.input import RunInput
from node.agui.runs import AGUI_RUNS
from node.context import context_of
from node.protocols.a2a_jsonrpc import hosted_agent
from node.protocols.lifecycle import StopSignal, revoked
from node.streams.slots import STREAM_SLOTS
from node.streams.sse import ClientGone, SseOut
from node.web.auth import identity_of
from node.web.body import json_body

log = logging.getLogger(__name__)


async def agui_run(request: web.Request) -> web.StreamResponse:
    agent = hosted_agent(request)
    run = await json_body(request, RunInput)
    ctx = context_of(request)
    runs = request.app[AGUI_RUNS]
    identity = identity_of(request)
    operator = identity.name if identity else "anonymous"
    groups = identity.groups if identity else frozenset()
    slots = request.app[STREAM_SLOTS]
    slot = slots.open(request)
    out = SseOut(request)
    stop = StopSignal(request.app)
    slot.on_revoke = lambda: revoked(stop, out)
    events = runs.run(agent, run, operator, stop, ctx.config.node.sse_keepalive_secs, groups)
    try:
        await out.open()
        async for event in events:
            if event is None:
                await out.ping()
            else:
                await out.send(event)
    except ClientGone:
        pass
    except Exception:
        log.exception("AG-UI run %s of %s failed", run.run_id, agent)
        error = RunEvents(run.thread_id, run.run_id).error(
            "the node failed during the run", "INTERNAL_ERROR"
        )
        await out.send_last(error)
    finally:
        await events.aclose()
        stop.close()
        slots.close(slot)
    return out.response
