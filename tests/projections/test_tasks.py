"""Tasks: created → pending; started/progress → running; completed, failed, canceled final."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from eventstore.envelope import Envelope
from projections.states import TaskState
from projections.tasks import TASK_EVENTS, Task, Tasks
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot, ts_at


def create(j: Journal, agent: str, task_id: str, **extra: Any) -> None:
    j.add(agent, "task.created", {"id": task_id, "from": "boss", "to": agent, **extra})


def ids(found: list[Task]) -> list[str]:
    return [t.id for t in found]


def fold_directly(tasks: Tasks, envelopes: list[Envelope]) -> Tasks:
    """Past the registry's filter (`handles`) and the ownership rule: the model's own fold."""
    fold(tasks, [])  # bound to a scratch environment
    with tasks.space.env.begin(write=True) as txn:
        for one in envelopes:
            tasks.fold(txn, one)
    return tasks


def test_a_created_task_is_pending() -> None:
    j = Journal()
    create(j, "alice", "t1", input={"n": 1})
    tasks = fold(Tasks(), j.envelopes)
    task = Task(
        id="t1", from_="boss", to="alice", status="pending", input={"n": 1}, created_at=ts_at(1)
    )
    assert tasks.get("t1") == task
    assert tasks.list() == [task]
    assert tasks.list(status="pending", agent="alice") == [task]
    # the spec's object: `from`, no progress or error until they exist
    assert msgspec.to_builtins(task) == {
        "id": "t1",
        "from": "boss",
        "to": "alice",
        "status": "pending",
        "input": {"n": 1},
        "output": None,
        "created_at": ts_at(1),
        "completed_at": None,
    }


def test_the_assigned_agent_is_the_journal_and_input_defaults_to_empty() -> None:
    """`to` is the journal the task was created in, whatever its data says."""
    created = envelope("bob", 1, "task.created", {"id": "t1", "to": "x", "input": 3}, position=1)
    task = fold(Tasks(), [created]).get("t1")
    assert task is not None
    assert (task.to, task.from_, task.input) == ("bob", "", {})


@pytest.mark.parametrize("kind", ["task.started", "task.progress"])
def test_started_or_progress_makes_it_running(kind: str) -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", kind, {"id": "t1"})
    tasks = fold(Tasks(), j.envelopes)
    task = tasks.get("t1")
    assert task is not None and task.status == "running"
    assert task.progress is msgspec.UNSET  # no report carried
    assert tasks.list(status="pending", agent="alice") == []
    assert tasks.list(status="running") == [task]


def test_progress_keeps_the_latest_report() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "task.progress", {"id": "t1", "progress": {"done": 1}})
    j.add("alice", "task.progress", {"id": "t1", "progress": "half"})
    j.add("alice", "task.progress", {"id": "t1"})  # without a report: keeps the last one
    task = fold(Tasks(), j.envelopes).get("t1")
    assert task is not None
    assert (task.status, task.progress) == ("running", "half")
    assert msgspec.to_builtins(task)["progress"] == "half"


def test_completed_is_final_with_its_output_and_time() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "task.completed", {"id": "t1", "output": {"ok": True}})
    task = fold(Tasks(), j.envelopes).get("t1")
    assert task is not None
    assert (task.status, task.output, task.completed_at) == ("completed", {"ok": True}, ts_at(3))
    assert task.error is msgspec.UNSET


def test_a_non_dict_output_is_empty() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.completed", {"id": "t1", "output": [1, 2]})
    task = fold(Tasks(), j.envelopes).get("t1")
    assert task is not None and task.output == {}


def test_failed_is_final_with_its_error() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.failed", {"id": "t1", "error": "trap"})
    create(j, "alice", "t2")
    j.add("alice", "task.failed", {"id": "t2"})
    tasks = fold(Tasks(), j.envelopes)
    assert [(t.status, t.error, t.completed_at) for t in tasks.list()] == [
        ("failed", "trap", ts_at(2)),
        ("failed", "", ts_at(4)),
    ]
    assert tasks.list(status="pending") == []


@pytest.mark.parametrize(
    ("operator", "error"),
    [
        ("carol", "canceled by carol"),
        (None, "canceled by an operator"),
        ("", "canceled by an operator"),
    ],
)
def test_canceled_shows_as_failed_with_who_canceled(operator: str | None, error: str) -> None:
    j = Journal()
    create(j, "alice", "t1")
    data: dict[str, Any] = {"id": "t1"}
    if operator is not None:
        data["operator"] = operator
    j.add("alice", "task.canceled", data)
    task = fold(Tasks(), j.envelopes).get("t1")
    assert task is not None
    assert (task.status, task.error, task.completed_at) == ("failed", error, ts_at(2))


@pytest.mark.parametrize("final", ["task.completed", "task.failed", "task.canceled"])
def test_events_for_a_final_task_are_ignored(final: str) -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", final, {"id": "t1", "output": {"first": 1}, "error": "first"})
    tasks = fold(Tasks(), j.envelopes)
    before = tasks.snapshot()
    for kind in ("task.started", "task.progress", "task.completed", "task.failed", "task.canceled"):
        j.add("alice", kind, {"id": "t1", "progress": 9, "output": {"late": 1}, "error": "late"})
    assert fold(Tasks(), j.envelopes).snapshot() == before


def test_a_second_create_of_an_id_is_ignored_even_in_another_journal() -> None:
    j = Journal()
    create(j, "alice", "t1", input={"first": True})
    create(j, "alice", "t1", input={"second": True})
    create(j, "bob", "t1")
    tasks = fold(Tasks(), j.envelopes)
    assert [(t.to, t.input) for t in tasks.list()] == [("alice", {"first": True})]
    assert tasks.list(status="pending", agent="bob") == []


@pytest.mark.parametrize("guarded", [True, False])
def test_events_for_unknown_tasks_or_from_another_journal_are_ignored(guarded: bool) -> None:
    """With the ownership rule in front (as in the node) and without it: Tasks checks the
    journal itself too."""
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.completed", {"id": "nope", "output": {}})
    j.add("bob", "task.started", {"id": "t1"})  # alice's task, bob's journal
    j.add("bob", "task.completed", {"id": "t1", "output": {}})
    j.add("bob", "task.canceled", {"id": "t1"})
    j.add("alice", "task.started", {"id": 1})  # not a string id
    tasks = fold(Tasks(), j.envelopes, guarded=guarded)
    assert [(t.id, t.status) for t in tasks.list()] == [("t1", "pending")]
    assert tasks.get("nope") is None


def test_other_event_types_are_not_handled_and_change_nothing() -> None:
    assert "log" not in TASK_EVENTS and "task.unknown" not in TASK_EVENTS
    tasks = fold_directly(
        Tasks(),
        [
            envelope("alice", 1, "log", {"id": "t1"}, position=1),
            envelope("alice", 2, "task.unknown", {"id": "t1"}, position=2),
        ],
    )
    assert tasks.snapshot() == fold(Tasks(), []).snapshot()
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.unknown", {"id": "t1"})  # a task.* type it does not know
    direct = fold_directly(Tasks(), j.envelopes)
    assert direct.snapshot() == fold(Tasks(), j.envelopes[:1]).snapshot()


def test_list_filters_by_status_and_agent_in_creation_order() -> None:
    j = Journal()
    create(j, "alice", "a1")
    create(j, "bob", "b1")
    create(j, "alice", "a2")
    create(j, "alice", "a3")
    j.add("alice", "task.started", {"id": "a1"})
    j.add("alice", "task.completed", {"id": "a2", "output": {}})
    tasks = fold(Tasks(), j.envelopes)
    assert ids(tasks.list()) == ["a1", "b1", "a2", "a3"]
    assert ids(tasks.list(agent="alice")) == ["a1", "a2", "a3"]
    assert ids(tasks.list(status="pending")) == ["b1", "a3"]
    assert ids(tasks.list(status="pending", agent="alice")) == ["a3"]
    assert ids(tasks.list(status="running", agent="alice")) == ["a1"]
    assert ids(tasks.list(status="completed")) == ["a2"]
    assert ids(tasks.list(status="pending", agent="nobody")) == []
    assert ids(tasks.list(status="bogus")) == []


def test_snapshot_and_refold() -> None:
    j = Journal()
    create(j, "alice", "a1")
    create(j, "bob", "b1")
    create(j, "alice", "a2")
    j.add("alice", "task.progress", {"id": "a1", "progress": {"p": 1}})
    j.add("bob", "task.canceled", {"id": "b1", "operator": "op"})
    tasks = fold(Tasks(), j.envelopes)
    snapshot = tasks.snapshot()
    assert [(t["id"], t["status"]) for t in snapshot["tasks"]] == [
        ("a1", "running"),
        ("b1", "failed"),
        ("a2", "pending"),
    ]
    assert snapshot["tasks"][0]["progress"] == {"p": 1}
    assert snapshot["pending"] == {"alice": ["a2"]}  # bob has none left: no empty entry
    assert refolded_snapshot(tasks, j.envelopes) == snapshot


def test_events_before_the_create_are_ignored() -> None:
    """Out of order: a task cannot start or finish before it exists."""
    j = Journal()
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "task.completed", {"id": "t1", "output": {}})
    create(j, "alice", "t1")
    tasks = fold(Tasks(), j.envelopes)
    task = tasks.get("t1")
    assert task is not None
    assert (task.status, task.output, task.created_at) == ("pending", None, ts_at(3))


def test_open_tasks_are_the_pending_and_running_ones_in_creation_order() -> None:
    """What the runtime delivers again after a restart, read from the index of open tasks."""
    j = Journal()
    create(j, "alice", "a1")
    create(j, "bob", "b1")
    create(j, "alice", "a2")
    create(j, "alice", "a3")
    create(j, "alice", "a4")
    j.add("alice", "task.started", {"id": "a3"})
    j.add("alice", "task.progress", {"id": "a1", "progress": 1})
    j.add("alice", "task.completed", {"id": "a2", "output": {}})
    j.add("alice", "task.canceled", {"id": "a4"})
    tasks = fold(Tasks(), j.envelopes)
    assert [(t.id, t.status) for t in tasks.open_tasks("alice")] == [
        ("a1", "running"),
        ("a3", "running"),
    ]
    assert ids(tasks.open_tasks("bob")) == ["b1"]
    assert tasks.open_tasks("nobody") == []
    assert ids(tasks.list(status="running")) == ["a1", "a3"]
    assert ids(tasks.list(status="pending")) == ["b1"]
    j.add("alice", "task.failed", {"id": "a1", "error": "x"})
    create(j, "alice", "a5")
    tasks = fold(Tasks(), j.envelopes)
    assert ids(tasks.open_tasks("alice")) == ["a3", "a5"]
    assert ids(tasks.list(status="pending", agent="alice")) == ["a5"]


def test_pending_across_agents_is_in_creation_order() -> None:
    j = Journal()
    create(j, "zed", "z1")
    create(j, "alice", "a1")
    create(j, "zed", "z2")
    assert ids(fold(Tasks(), j.envelopes).list(status="pending")) == ["z1", "a1", "z2"]


def test_an_empty_id_names_no_task_and_one_longer_than_a_key_is_kept() -> None:
    """An empty id is ignored like a non-string id; one too long for an LMDB key (511 bytes)
    is stored under its digest and reads back whole."""
    j = Journal()
    create(j, "alice", "")
    create(j, "alice", "x" * 600)
    create(j, "alice", "t1")
    j.add("alice", "task.completed", {"id": "x" * 600, "output": {"ok": True}})
    tasks = fold(Tasks(), j.envelopes)
    assert ids(tasks.list()) == ["x" * 600, "t1"]
    assert tasks.get("") is None
    long = tasks.get("x" * 600)
    assert long is not None and long.status == "completed" and long.output == {"ok": True}
    assert tasks.list(agent="a" * 600) == []


def test_what_a_journal_carries_reads_back_as_it_was() -> None:
    """Input, output and progress go through msgpack on disk and come back unchanged, maps
    with keys other than strings included."""
    j = Journal()
    create(j, "alice", "t1", input={"n": 1, "nested": {"list": [1, "two", None], "f": 1.5}})
    j.add("alice", "task.progress", {"id": "t1", "progress": {1: "one"}})
    tasks = fold(Tasks(), j.envelopes)
    task = tasks.get("t1")
    assert task is not None
    assert task.input == {"n": 1, "nested": {"list": [1, "two", None], "f": 1.5}}
    assert task.progress == {1: "one"}


# ---------------------------------------------------------------------------- multi-turn
def awaiting(j: Journal, agent: str, task_id: str, **data: Any) -> None:
    j.add(agent, "task.awaiting", {"id": task_id, **data})


def message(j: Journal, agent: str, task_id: str, text: str) -> None:
    data = {"id": task_id, "input": {"text": text}, "operator": "op"}
    j.add(agent, "task.message", {**data, "a2a": {"messageId": text, "role": "ROLE_USER"}})


def delivered(tasks: Tasks, agent: str) -> list[tuple[str, str, dict]]:
    """(id, from, input) of each task `deliverable` hands the agent's worker."""
    return [(t.id, t.from_, t.input) for t in tasks.deliverable(agent)]


def test_a_task_awaiting_its_client_is_open_but_not_delivered_until_its_next_message() -> None:
    """task.awaiting ends the run, not the task: it stays running (or input-required when the
    agent asks), keeps its open-task slot, and is not what a restart delivers again until the
    client's next message, whose input the next run gets."""
    j = Journal()
    create(j, "alice", "t1", input={"text": "first"})
    create(j, "alice", "t2")
    j.add("alice", "task.started", {"id": "t1"})
    awaiting(j, "alice", "t1", message="say more", reply={"kept": 1})
    tasks = fold(Tasks(), j.envelopes)
    assert tasks.state_of("t1") == TaskState.RUNNING and tasks.awaits("t1")
    assert tasks.working_on("alice") is None  # the run ended
    assert ids(tasks.open_tasks("alice")) == ["t1", "t2"]  # both hold a slot
    assert delivered(tasks, "alice") == [("t2", "boss", {})]
    assert tasks.deliverable_task("t1") is None
    served = tasks.get("t1")
    assert served is not None and served.status == "running"
    assert served.waiting_for == "waiting for the next message from its client"

    message(j, "alice", "t1", "second")
    tasks = fold(Tasks(), j.envelopes)
    assert not tasks.awaits("t1") and tasks.state_of("t1") == TaskState.RUNNING
    assert delivered(tasks, "alice") == [
        ("t1", "boss", {"text": "second"}),
        ("t2", "boss", {}),
    ]
    j.add("alice", "task.started", {"id": "t1"})
    awaiting(j, "alice", "t1", input_required=True, message="which one?")
    tasks = fold(Tasks(), j.envelopes)
    assert tasks.state_of("t1") == TaskState.INPUT_REQUIRED
    assert [(t["role"], t.get("message")) for t in tasks.turns("t1")] == [
        ("agent", "say more"),
        ("user", {"messageId": "second", "role": "ROLE_USER"}),
        ("agent", "which one?"),
    ]
    assert tasks.turns("t1")[0]["reply"] == {"kept": 1}
    message(j, "alice", "t1", "this one")
    j.add("alice", "task.completed", {"id": "t1", "output": {"done": True}})
    tasks = fold(Tasks(), j.envelopes)
    assert tasks.state_of("t1") == TaskState.COMPLETED and not tasks.awaits("t1")
    assert len(tasks.turns("t1")) == 4
    assert refolded_snapshot(tasks, j.envelopes) == tasks.snapshot()


def test_turns_that_do_not_fit_change_nothing() -> None:
    """A message to a task that does not await one (pending, running its turn, final) and an
    awaiting for a task that is not running are ignored; a cancel ends an awaiting task."""
    j = Journal()
    create(j, "alice", "t1")
    message(j, "alice", "t1", "too early")  # pending
    awaiting(j, "alice", "t1")  # not running
    j.add("alice", "task.started", {"id": "t1"})
    message(j, "alice", "t1", "while it runs")
    awaiting(j, "alice", "t1", reply="not an object")  # a payload that does not fit
    tasks = fold(Tasks(), j.envelopes)
    assert tasks.turns("t1") == [] and not tasks.awaits("t1")
    awaiting(j, "alice", "t1")
    j.add("alice", "task.canceled", {"id": "t1", "operator": "op"})
    message(j, "alice", "t1", "too late")
    tasks = fold(Tasks(), j.envelopes)
    assert tasks.state_of("t1") == TaskState.CANCELED and not tasks.awaits("t1")
    assert [t["role"] for t in tasks.turns("t1")] == ["agent"]
    assert tasks.deliverable("alice") == []


def test_a_peer_cannot_answer_a_task_another_journal_owns() -> None:
    """The ownership rule covers the turns: a message in another journal is not folded."""
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    awaiting(j, "alice", "t1")
    message(j, "mallory", "t1", "from elsewhere")
    tasks = fold(Tasks(), j.envelopes)
    assert tasks.awaits("t1") and [t["role"] for t in tasks.turns("t1")] == ["agent"]
