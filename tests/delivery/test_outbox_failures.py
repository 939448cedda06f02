"""The outbox after a write that failed (the disk full): the fold folds the same envelopes
again on a book rebuilt from the store, and a lane whose head the store lost goes on with its
next entry instead of being tried at once, forever. A real node with the cashier, its real
outbox LMDB in a temp dir, notifications to a real receiving server.

The failure is injected at the narrowest seam: `OutboxStore.commit` (the one call every write
of the outbox goes through) raises `lmdb.MapFullError`, what LMDB raises when its map or the
disk is full; everything above and below it is the real thing."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import lmdb
import pytest

from node.delivery import book as b
from node.delivery import store as s
from node.delivery.service import OUTBOX, Outbox
from tests.delivery.support import DELIVERY_TOML, Receiver, rpc, send_params, start_receiver
from tests.polling import until
from tests.protocol_support import cashier_toml, start_node, started
from tests.support import OPERATE_TOKEN

BEFORE = ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]
AFTER = ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]


class FullDisk:
    """The outbox's commits that `refuses` fail as on a full disk; `folds_failed` counts the
    failed ones that carried the fold's cursor (a commit of the fold)."""

    def __init__(self, store: s.OutboxStore) -> None:
        self.refuses: Callable[[list[s.Op]], bool] = lambda ops: False
        self.folds_failed = 0
        self._commit = store.commit
        store.commit = self.commit  # type: ignore[method-assign]

    async def commit(self, ops: list[s.Op]) -> None:
        if self.refuses(ops):
            self.folds_failed += any(op[:2] == ("meta", b"cursor") for op in ops)
            raise lmdb.MapFullError("mdb_put: MDB_MAP_FULL: Environment mapsize limit reached")
        await self._commit(ops)


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    toml = cashier_toml("cashier", built_agents["cashier"]) + DELIVERY_TOML
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "cashier")
    return node


def states(receiver: Receiver) -> list[str]:
    return [json.loads(r.body)["task"]["status"]["state"] for r in receiver.received]


@pytest.fixture
async def waiting(node, http, aiohttp_server) -> tuple[Receiver, Outbox, str, str, FullDisk]:
    """A cashier task waiting for its approval, its first three notifications delivered and
    committed: the receiver, the outbox (its disk as the test makes it), the task, its lane."""
    receiver = await start_receiver(aiohttp_server)
    params = send_params({"pay": {"invoice": "INV-9"}}, push_url=f"{receiver.url}/hook")
    task = (await rpc(http, node.url, "cashier", "SendMessage", params, OPERATE_TOKEN))["result"]
    task_id = task["task"]["id"]
    await receiver.wait_for(3)
    outbox = node.app[OUTBOX]
    lane_id = b.push_lane_id(task_id, task_id)
    await until(lambda: outbox.book.head(lane_id) is None, 10, "the three are ended")
    await outbox.writer.idle()
    assert states(receiver) == BEFORE
    assert outbox.store is not None
    return receiver, outbox, task_id, lane_id, FullDisk(outbox.store)


async def approve(node, http, task_id: str) -> None:
    message = {"messageId": "a", "role": "ROLE_USER", "taskId": task_id}
    message["parts"] = [{"text": "approve"}]
    answer = await rpc(
        http, node.url, "cashier", "SendMessage", {"message": message}, OPERATE_TOKEN
    )
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer


def book_matches_store(outbox: Outbox) -> None:
    """Every lane's queue in the book is the one in the store, entry for entry."""
    assert outbox.store is not None
    for lane_id in outbox.book.lanes:
        held = [p.entry_id for p in outbox.book.pending.get(lane_id, ())]
        stored = [e.id for e in outbox.store.entries(lane_id)]
        assert held == stored, lane_id


async def test_a_failed_commit_folds_its_envelopes_again_and_none_is_lost(node, http, waiting):
    receiver, outbox, task_id, lane_id, disk = waiting
    assert outbox.store is not None
    disk.refuses = lambda ops: True
    await approve(node, http, task_id)  # the journal is not the outbox: the task completes
    completed_at = node.ctx.store.last_position
    # each failed fold rebuilt the book from the store: it holds nothing the store lacks
    await until(
        lambda: disk.folds_failed >= 2 and outbox.book.head(lane_id) is None,
        10,
        "the fold tried, failed, and tried again",
    )
    book_matches_store(outbox)
    assert states(receiver) == BEFORE

    disk.refuses = lambda ops: False
    await receiver.wait_for(5)
    await until(lambda: outbox.book.head(lane_id) is None, 10, "WORKING and COMPLETED ended")
    await outbox.writer.idle()
    assert states(receiver) == BEFORE + AFTER  # each once, in order
    lane = outbox.book.lane(lane_id)
    assert lane is not None and lane.delivered == 5 and lane.closed == "final"
    book_matches_store(outbox)
    cursor = outbox.store.cursor()
    assert cursor is not None and cursor >= completed_at


async def test_a_head_the_store_lost_is_skipped_once_and_the_lane_goes_on(node, http, waiting):
    receiver, outbox, task_id, lane_id, disk = waiting
    assert outbox.store is not None
    dispatcher = outbox.dispatcher
    tries = 0
    real_try: Callable[[str], Awaitable[Any]] = dispatcher._try_head

    async def counted(lane: str) -> None:
        nonlocal tries
        tries += lane == lane_id
        await real_try(lane)

    dispatcher._try_head = counted  # type: ignore[method-assign]

    # an entry the book queued and the store never got: its write failed
    lane = outbox.book.lane(lane_id)
    assert lane is not None
    now = time.time()
    seq = 10**9
    lost = s.Entry(
        id=b.entry_id(seq, 0, lane_id),
        lane=lane_id,
        journal="cashier",
        seq=seq,
        n=0,
        kind="push",
        label="lost",
        made_at=now,
        due=now,
        deadline=now + 60,
        body=b"{}",
    )
    lost_key = ("entries", s.entry_key(lane_id, seq, 0))
    disk.refuses = lambda ops: any(op[:2] == lost_key for op in ops)
    with pytest.raises(lmdb.MapFullError):
        await outbox.writer.submit(outbox.book.enqueue(lane, lost, now))
    assert outbox.book.head(lane_id) is not None and outbox.store.head(lane_id) is None

    dispatcher.schedule([lane_id])
    await until(lambda: outbox.book.head(lane_id) is None, 10, "the lost head is forgotten")
    assert tries <= 2  # tried once (and maybe rescheduled once), not spinning

    await approve(node, http, task_id)
    await receiver.wait_for(5)
    await until(lambda: outbox.book.head(lane_id) is None, 10, "WORKING and COMPLETED ended")
    assert states(receiver) == BEFORE + AFTER  # the lost one was never sent
    assert tries <= 6, tries
    await outbox.writer.idle()
    book_matches_store(outbox)


def expired_entry(lane_id: str, seq: int, n: int, now: float) -> s.Entry:
    """An entry whose deadline has passed: given up when tried, never sent."""
    return s.Entry(
        id=b.entry_id(seq, n, lane_id),
        lane=lane_id,
        journal="cashier",
        seq=seq,
        n=n,
        kind="push",
        label="expired",
        made_at=now - 60,
        due=now - 60,
        deadline=now - 1,
        body=b"{}",
    )


async def test_a_store_head_older_than_the_book_rebuilds_the_lane_not_a_retry_loop(
    node, http, waiting
):
    """The delete of an ended head failed: the book moved on to the next entry, the store
    still holds the ended one. The lane is rebuilt from the store once (a retry every 0.05 s
    until the book's next rebuild, before), and both entries end."""
    receiver, outbox, _task, lane_id, disk = waiting
    assert outbox.store is not None
    dispatcher = outbox.dispatcher
    tries = 0
    real_try: Callable[[str], Awaitable[Any]] = dispatcher._try_head

    async def counted(lane: str) -> None:
        nonlocal tries
        tries += lane == lane_id
        await real_try(lane)

    dispatcher._try_head = counted  # type: ignore[method-assign]
    lane = outbox.book.lane(lane_id)
    assert lane is not None
    now, seq = time.time(), 10**9
    first, second = expired_entry(lane_id, seq, 0, now), expired_entry(lane_id, seq, 1, now)
    await outbox.writer.submit(outbox.book.enqueue(lane, first, now))
    await outbox.writer.submit(outbox.book.enqueue(lane, second, now))
    first_key = ("entries", s.entry_key(lane_id, seq, 0))
    disk.refuses = lambda ops: any(op[:2] == first_key for op in ops)
    with pytest.raises(lmdb.MapFullError):
        await outbox.writer.submit(outbox.book.end_head(lane, first, now))
    disk.refuses = lambda ops: False
    head, stored = outbox.book.head(lane_id), outbox.store.head(lane_id)
    assert head is not None and stored is not None and (head.n, stored.n) == (1, 0)

    expired = lane.expired
    dispatcher.schedule([lane_id])
    await until(lambda: outbox.book.head(lane_id) is None, 10, "both entries ended")
    assert tries <= 4, tries  # realigned once, then each entry ended: no retry loop
    assert lane.expired == expired + 2
    await outbox.writer.idle()
    book_matches_store(outbox)
    assert states(receiver) == BEFORE  # neither was sent
