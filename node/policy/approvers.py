"""How many distinct people a request needs, and from which groups: `@approvers("2")`,
`@approvers("2 from finance")`, `@approvers("1 from ops, 1 from finance")`.

A requirement is a list of slots (`ApproverSlot`: a count, from a group or anyone). Each
approver fills at most one slot, and only one of a group it was in when it approved; the
request is approved once every slot is filled. Which approver fills which slot is a matching
(a few people, a few slots: augmenting paths), so the order approvals come in never matters:
an approver in both groups is counted where they are needed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from projections.catalogue import MAX_APPROVERS, ApproverSlot

_SLOT = re.compile(r"^\s*([0-9]{1,2})(?:\s+from\s+([A-Za-z0-9][A-Za-z0-9._-]{0,63}))?\s*$")


class Approver(NamedTuple):
    """One distinct approval: the token's name and its groups when it approved."""

    name: str
    groups: frozenset[str]


def parse_requirement(text: str) -> list[ApproverSlot]:
    """`"2, 1 from finance"` as slots; ValueError saying what is wrong."""
    slots: list[ApproverSlot] = []
    for part in text.split(","):
        match = _SLOT.match(part)
        if match is None:
            raise ValueError(
                f"{part.strip()[:80]!r} is not N or N from GROUP (say `2` or `1 from finance`)"
            )
        count = int(match.group(1))
        if count < 1:
            raise ValueError("a count of approvers is at least 1")
        slots.append(ApproverSlot(count=count, group=match.group(2)))
    total = needed(slots)
    if total > MAX_APPROVERS:
        raise ValueError(f"at most {MAX_APPROVERS} approvers in all, got {total}")
    return slots


def needed(slots: Sequence[ApproverSlot]) -> int:
    return sum(slot.count for slot in slots)


def groups_named(slots: Sequence[ApproverSlot]) -> set[str]:
    return {slot.group for slot in slots if slot.group is not None}


def stricter(a: Sequence[ApproverSlot], b: Sequence[ApproverSlot]) -> bool:
    """Whether requirement `a` asks for more people than `b` (ties: more named groups)."""
    return (needed(a), len(groups_named(a))) > (needed(b), len(groups_named(b)))


def describe(slots: Sequence[ApproverSlot]) -> str:
    """The requirement as a rule writes it: "2, 1 from finance"."""
    return ", ".join(
        f"{slot.count} from {slot.group}" if slot.group else str(slot.count) for slot in slots
    )


def _seats(slots: Sequence[ApproverSlot]) -> list[str | None]:
    """One seat per approver needed, a group's before anyone's: an approver who could sit in
    either takes their group's, leaving the open seat to someone else."""
    named = [slot.group for slot in slots if slot.group for _ in range(slot.count)]
    return [*named, *(None for slot in slots if not slot.group for _ in range(slot.count))]


def _matching(seats: list[str | None], approvers: Sequence[Approver]) -> list[int | None]:
    """seat → index of the approver filling it (None: open), as many seats filled as can be."""
    filled: list[int | None] = [None] * len(seats)

    def fits(seat: int, who: int) -> bool:
        group = seats[seat]
        return group is None or group in approvers[who].groups

    def place(who: int, tried: set[int]) -> bool:
        for seat in range(len(seats)):
            if seat in tried or not fits(seat, who):
                continue
            tried.add(seat)
            holder = filled[seat]
            if holder is None or place(holder, tried):
                filled[seat] = who
                return True
        return False

    for who in range(len(approvers)):
        place(who, set())
    return filled


class Progress(NamedTuple):
    """Where a request that needs several approvers stands: "1 of 2, waiting for finance"."""

    needed: int
    approved_by: list[str]  # the approvers counted (each fills a seat)
    waiting_for: list[str]  # what is still missing, in words ("finance", "1 more approver")

    @property
    def complete(self) -> bool:
        return not self.waiting_for

    @property
    def text(self) -> str:
        counted = f"{len(self.approved_by)} of {self.needed}"
        if not self.waiting_for:
            return counted
        return f"{counted}, waiting for {', '.join(self.waiting_for)}"


def progress(slots: Sequence[ApproverSlot], approvers: Sequence[Approver]) -> Progress:
    seats = _seats(slots)
    filled = _matching(seats, approvers)
    counted = sorted({i for i in filled if i is not None})
    open_by_group: dict[str | None, int] = {}
    for seat, holder in enumerate(filled):
        if holder is None:
            open_by_group[seats[seat]] = open_by_group.get(seats[seat], 0) + 1
    waiting = [
        (group if count == 1 else f"{count} from {group}")
        for group, count in open_by_group.items()
        if group is not None
    ]
    anyone = open_by_group.get(None, 0)
    if anyone:
        waiting.append(f"{anyone} more approver" + ("s" if anyone > 1 else ""))
    return Progress(len(seats), [approvers[i].name for i in counted], waiting)


def would_count(
    slots: Sequence[ApproverSlot], approvers: Sequence[Approver], newcomer: Approver
) -> bool:
    """Whether `newcomer`'s approval fills a seat that is still open (it may move another
    approver to a seat of theirs): otherwise it would not bring the request nearer."""
    before = len(progress(slots, approvers).approved_by)
    return len(progress(slots, [*approvers, newcomer]).approved_by) > before
