"""A takeover as the judge sees it, the judge's answer, and a batch's takeovers judged at once.

The judge itself (what the mesh must show: the home's lease gone, nothing acknowledged erased)
is the placement layer's (node/placement/judge.py); the receive rules only ask it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from node.sync.rules.outcome import UNJUDGED

log = logging.getLogger("agent-node.sync")
# a batch's takeovers are judged this many at a time, all within one deadline (the judge's
# own per-claim deadline is JUDGE_TIMEOUT_SECS in node/placement/judge.py)
JUDGE_LANES = 8
BATCH_JUDGE_SECS = 6.0


@dataclass(frozen=True)
class TakeoverClaim:
    """A takeover the envelope's own checks let through, for the judge to look at."""

    stream: str
    seq: int
    origin: str  # its signer: the would-be home
    epoch: int  # the epoch it claims
    previous_home: str
    previous_epoch: int
    held: int  # this node's head of the journal (seq <= held: a fork)
    ts: str
    prev: str | None = None  # the digest it follows: only a sibling of it is history it erases
    digest: str = ""  # its own payload's sha256 (hex): found in the stream by it
    lease_position: int = 0  # the stream position of its taker's lease record (its payload's)


@dataclass(frozen=True)
class Verdict:
    """Why a takeover is refused; `report`: journal a finding naming its signer (else the
    refusal is for now: nothing could be checked)."""

    reason: str
    detail: str
    report: bool = True
    # refused by this node as the journal's home live at the takeover's lease record: it writes
    # the takeover's seq itself (receiver.Receiver._refute), a report in its journal (the
    # verdict itself every node reads from the stream's lease log, node/placement/judge.py)
    refuted: bool = False


class TakeoverJudge(Protocol):
    async def judge(self, claim: TakeoverClaim) -> Verdict | None: ...


async def judged(
    judge: TakeoverJudge | None, claims: dict[int, TakeoverClaim]
) -> dict[int, Verdict]:
    """The judge's refusals of a batch's takeovers, judged JUDGE_LANES at a time within
    one deadline (BATCH_JUDGE_SECS): what it has not answered by then is unjudged."""
    if judge is None:
        idle = Verdict(UNJUDGED, "placement is not running", report=False)
        return dict.fromkeys(claims, idle)
    lanes = asyncio.Semaphore(JUDGE_LANES)

    async def one(claim: TakeoverClaim) -> Verdict | None:
        async with lanes:
            return await judge.judge(claim)

    tasks = {index: asyncio.ensure_future(one(claim)) for index, claim in claims.items()}
    try:
        await asyncio.wait(tasks.values(), timeout=BATCH_JUDGE_SECS)
    finally:
        for task in tasks.values():
            task.cancel()
    late = Verdict(UNJUDGED, "the mesh did not answer in time", report=False)
    verdicts = {}
    for index, task in tasks.items():
        if not task.done() or task.cancelled():
            verdicts[index] = late
        elif task.exception() is not None:
            log.error("judging %s failed", claims[index], exc_info=task.exception())
            verdicts[index] = Verdict(UNJUDGED, "the judge failed", report=False)
        elif (verdict := task.result()) is not None:
            verdicts[index] = verdict
    return verdicts
