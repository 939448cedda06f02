"""The example config (examples/runtime.toml) with the example policy
(examples/policies/payments.cedar), as `scripts/run` starts it: the payer's payments fit the
policy's declared fields, so a small one on a weekday morning is permitted by the policy, with
no person asked (the payer used to send `amount_cents`, which no policy reads)."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime

from node.app import build_app
from node.config.load import load_config
from node.services.approvals import APPROVALS
from tests.polling import until
from tests.runtime.test_runtime_node import journal
from tests.support import ROOT, free_port

WEDNESDAY_10_BERLIN = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)


async def test_the_example_payer_is_permitted_by_the_example_policy(
    aiohttp_server, tmp_path, built_agents
):
    text = (ROOT / "examples" / "runtime.toml").read_text()
    port = free_port()
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    text = re.sub(
        r'"\.\./build/agents/([a-z_]+)\.wasm"', lambda m: f'"{built_agents[m.group(1)]}"', text
    )
    (tmp_path / "policies").mkdir()
    shutil.copy(ROOT / "examples/policies/payments.cedar", tmp_path / "policies/payments.cedar")
    (tmp_path / "runtime.toml").write_text(text)
    app = build_app(load_config(tmp_path / "runtime.toml"))
    # the example's office hours (weekdays 9:00-17:00 in Berlin) hold whenever the test runs
    app[APPROVALS].policy.clock = lambda: WEDNESDAY_10_BERLIN
    await aiohttp_server(app, port=port)

    decided = await until(lambda: journal(app, "payer", "approval.decided"), 120, "a decision")
    first = decided[0]
    assert (first["decision"], first["operator"]) == ("approve", "policy:small-payments"), first
    assert first["charges"][0]["amount"] == "9.5"
    (requested, *_) = journal(app, "payer", "approval.requested")
    assert '"amount": 9.5' in requested["request"] and "acme-supplies" in requested["request"]
    await until(
        lambda: any("paid INV-0001" in e.get("message", "") for e in journal(app, "payer", "log")),
        30,
        "the payment made",
    )
    assert app[APPROVALS].projection.list() == []  # nobody was asked
