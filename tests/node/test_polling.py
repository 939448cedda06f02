"""The one polling helper: it returns the first truthy value, names what it waited for at its
deadline, and is the only sleep-and-poll loop in the tree (a static check below)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from node.ops.polling import DeadlineExceeded, until, wait_until
from tests.support import ROOT

# Loops that sleep on purpose and are not waits for a condition: each runs until its owner
# stops it (a periodic job, a retry with backoff, `logs --follow`).
PERIODIC = {
    ("node/cli/client.py", "command"),  # logs/findings --follow
    ("node/services/approval_timeouts.py", "_flush_due"),  # retries journaling timeouts
    ("node/sync/acks.py", "run"),
    ("node/sync/http/replicator.py", "run"),
    ("node/streams/bus.py", "_tick"),  # keep-alives
    ("node/sync/nats/heads.py", "publish"),  # this node's heads into the KV bucket
    ("node/sync/nats/heads.py", "watch"),  # the peers' heads: the follower, started over
    ("node/sync/nats/heads.py", "_follow"),  # the peers' heads, pulled as they change
    ("node/placement/adverts.py", "run"),  # this node's advert, put every interval
    ("node/placement/manager.py", "serve"),  # every placed agent looked at every check_secs
    ("node/placement/manager.py", "_follow"),  # the loop lives while its connection does
    # samples the lease for three TTLs: it must hold at every look
    ("tests/placement/test_leases.py", "test_renewing_keeps_the_lease_and_moves_valid_until"),
    ("node/sync/nats/mesh.py", "run"),  # reconnects with backoff
    ("node/sync/nats/mesh.py", "_repair_check"),  # periodic: a journal the stream lost
    ("eventstore/writer.py", "_write_loop"),  # sleep(0): one GIL hand-off before a commit
    ("node/sync/nats/mesh.py", "_connected"),  # the NATS link, reconnecting with backoff
    ("node/sync/nats/repair_queue.py", "_work"),  # a peer's repair worker: a bug rests it 1 s
    ("tests/placement/test_adverts_components.py", "pump"),  # a slow link: holds each read
    ("tests/leakcheck.py", "reap"),  # a grace period for leftovers, then SIGKILL (no failure)
    ("tests/streams/test_streams_replay_memory.py", "watch"),  # samples RSS and /health
    # the honest nodes post and are measured for 45 s while the hostile member acts
    (
        "tests/sync/test_nats_hostile.py",
        "test_a_hostile_member_cannot_stall_or_starve_the_honest_nodes",
    ),
    ("bench/hostile_load.py", "one"),  # a slow client, reconnecting until the phase ends
    ("bench/hostile_load.py", "probe_health"),  # /health sampled for the phase
    ("bench/hostile_load.py", "reconnecting"),  # an attacker reconnecting until the phase ends
    # loops that ignore cancellation on purpose: what run_together must stop for sure
    ("tests/sync/test_loops.py", "losing"),
    ("tests/sync/test_loops.py", "stubborn"),
    ("node/cli/agents.py", "_await_probation"),  # prints a probation's progress as it goes
    ("node/services/rollouts.py", "_watch"),  # reads an instance's runs through its probation
    # a hostile member's lease attack: a round every period until stopped
    ("harness/hostile.py", "_attack"),
    ("harness/hostile.py", "_advertise"),  # a hostile member's false advert, every period
    ("harness/hostile.py", "_flood"),  # a hostile member's claim, every period until stopped
    # an agent's rate limit: waits the limiter's own time for room, refused past the deadline
    ("node/inference/service.py", "_admit"),
    # a provider's 429/503 tried again after its Retry-After, within the run's deadline
    ("node/inference/service.py", "_ask"),
    # adverts read until one is ready, the wait's end, or nobody is left to wait for; each
    # look is the upgrade's progress
    ("node/placement/standby.py", "wait_for_standby"),
    # the home is sampled through the lease attack: it must run the agent at every look
    (
        "tests/failover/test_hostile_member.py",
        "test_lease_attacks_under_load_move_nothing_and_a_failover_still_happens",
    ),
    # nobody may take a removed agent over: sampled for a lease TTL after its home's kill
    (
        "tests/failover/test_placement_ops.py",
        "test_an_operators_decisions_follow_the_agent_and_sigterm_hands_it_over",
    ),
}


def test_wait_until_returns_the_first_truthy_value():
    values = iter([0, None, "", "ready", "later"])
    assert wait_until(lambda: next(values), 1, "ready", interval=0) == "ready"


def test_wait_until_names_what_it_waited_for_and_the_last_error():
    def failing() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(DeadlineExceeded) as raised:
        wait_until(failing, 0.05, "the node is healthy", interval=0.01, retry_on=(OSError,))
    assert "the node is healthy not met within 0.05 s" in str(raised.value)
    assert "refused" in str(raised.value)
    assert isinstance(raised.value, TimeoutError)


def test_wait_until_does_not_swallow_other_errors():
    def broken() -> bool:
        raise ValueError("a bug, not a wait")

    with pytest.raises(ValueError):
        wait_until(broken, 1, "x", retry_on=(OSError,))


async def test_until_awaits_awaitables_and_keeps_the_loop_running():
    counter = itertools.count()

    async def read() -> int:
        return next(counter) >= 3

    assert await until(read, 1, "three reads", interval=0) is True
    with pytest.raises(DeadlineExceeded, match=r"never not met within 0\.02 s"):
        await until(lambda: False, 0.02, "never", interval=0.005)


def sleeping_loops(path: Path) -> list[tuple[str, int]]:
    """(innermost enclosing function, line) of every `while` loop whose body calls a `sleep`."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
                continue
            if isinstance(child, ast.While) and any(
                isinstance(call, ast.Call)
                and (getattr(call.func, "attr", None) or getattr(call.func, "id", None)) == "sleep"
                for call in ast.walk(child)
            ):
                found.append((function, child.lineno))
            visit(child, function)

    visit(ast.parse(path.read_text()), "<module>")
    return found


def test_no_hand_written_poll_loop_remains():
    offenders = []
    for folder in ("node", "eventstore", "projections", "harness", "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == "node/ops/polling.py" or "node_modules" in path.parts:
                continue
            for function, line in sleeping_loops(path):
                if (relative, function) not in PERIODIC:
                    offenders.append(f"{relative}:{line} in {function}")
    assert not offenders, "use node.ops.polling (until / wait_until) instead of:\n" + "\n".join(
        sorted(set(offenders))
    )
