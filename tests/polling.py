"""The suite waits with the project's one polling helper (`node/ops/polling.py`): a condition that
does not hold by its deadline raises `DeadlineExceeded`, naming what was awaited."""

from node.ops.polling import DeadlineExceeded, until, wait_until

__all__ = ["DeadlineExceeded", "until", "wait_until"]
