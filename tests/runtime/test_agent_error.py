"""The agent's own error, found in what its runtime wrote before trapping (node/runtime/
agenterror.py); the real Python case is tests/runtime/test_runtime_faults.py."""

from __future__ import annotations

from node.runtime.agenterror import own_error


def test_the_exception_before_componentize_pys_panic_with_where_it_was_raised():
    tail = [
        "Traceback (most recent call last):",
        '  File "/0/app.py", line 40, in handle_task',
        '  File "/0/app.py", line 12, in pay',
        "    raise PaymentRefused(invoice)",
        "app.PaymentRefused: INV-0007 refused",
        "thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:",
        "Python function threw an unexpected exception",
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
    ]
    assert own_error(tail) == "app.PaymentRefused: INV-0007 refused (app.py line 12, in pay)"


def test_a_javascript_error_line():
    tail = ["Error: upstream said no", "    at handleTask (app.js:31:11)"]
    assert own_error(tail) == "Error: upstream said no"


def test_nothing_of_the_agents_own_is_none():
    assert own_error([]) is None
    assert own_error(["tick 3", "note: something"]) is None
    assert own_error(["thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1:1:"]) is None
