"""The NATS consumer stages a batch in lanes of whole journals, by the journal each envelope
names: a member's subject may carry envelopes of several journals, and the home's and a
member's subjects one journal (docs/mesh.md, "NATS transport"). Real signed envelopes of the
model's journal and another, interleaved as a batch of two subjects delivers them."""

from __future__ import annotations

import msgspec

from harness.receive_model import MEMBER, OWNER, signed
from node.sync.nats.consumer import STAGE_LANES, journal_of, lanes_of
from node.sync.rules.receiver import MIN_LANE_SPLIT


def _of(journal: str, envelope: dict[str, object]) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode({**envelope, "agent": journal}))


def test_lanes_hold_whole_journals_in_the_batch_order() -> None:
    items: list[msgspec.Raw] = []
    for n in range(1, MIN_LANE_SPLIT + 1):
        # the home's subject: `worker`; the member's: `worker` and journals of its own
        items.append(_of("worker", signed(OWNER, n, "", None, severity="info", title="h")))
        journal = ("worker", "mine-1", "mine-2")[n % 3]
        items.append(_of(journal, signed(MEMBER, n, "", None, severity="info", title="m")))
    items.append(msgspec.Raw(b"not json"))
    lanes = lanes_of(items)
    assert len(lanes) == min(STAGE_LANES, 4)  # four journals (one unreadable)
    lane_of: dict[str | None, int] = {}
    for number, lane in enumerate(lanes):
        assert lane == sorted(lane)  # each lane in the batch's order
        for index in lane:
            named = journal_of(items[index])
            assert lane_of.setdefault(named, number) == number, named
    assert set(lane_of) == {"worker", "mine-1", "mine-2", None}
    assert sorted(i for lane in lanes for i in lane) == list(range(len(items)))


def test_a_small_batch_is_one_lane() -> None:
    items = [_of("worker", signed(OWNER, 1, "", None, severity="info", title="h"))] * 3
    assert lanes_of(items) == [[0, 1, 2]]
