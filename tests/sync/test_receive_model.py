"""The model of the receive rules (harness/receive_model.py) in the suite: a bounded number of
examples, each three honest nodes with real journals and a member with a key of its own.
`bench/model_receive.py --examples N` runs it long."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from harness.receive_model import ReceiveModel

ReceiveModel.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestReceiveModel = ReceiveModel.TestCase
