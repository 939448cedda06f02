"""The suite waits with the project's one polling helper (`node/polling.py`): a condition that
does not hold by its deadline raises `DeadlineExceeded`, naming what was awaited."""

from node.polling import DeadlineExceeded, until, wait_until

__all__ = ["DeadlineExceeded", "until", "wait_until"]
