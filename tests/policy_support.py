"""A policy set for the tests (docs/approvals.md's examples, without the clock: a test may run
at any hour) and the config lines that use it, with a `finance` approver token."""

from __future__ import annotations

from pathlib import Path

POLICY = """
@id("small-payments")
@description("known payees, at most 10 a payment and 100 a day, go through without a person")
@budget("amount 100 per day")
permit (principal, action == Action::"spend", resource)
when {
  context.request.amount.lessThanOrEqual(decimal("10.0")) &&
  ["acme", "globex"].contains(context.request.payee)
};

@id("two-approvers")
@approvers("1, 1 from finance")
permit (principal, action == Action::"spend", resource)
when { context.request.amount.greaterThan(decimal("1000.0")) };

@id("blocked-payee")
@reason("mallory is on the blocked list")
forbid (principal, action == Action::"spend", resource)
when { context.request.payee == "mallory" };
"""

FINANCE_TOKEN = "test-finance-token-0000001"
AUDITOR_TOKEN = "test-auditor-token-0000001"

POLICY_TOML = f"""
[[auth.tokens]]
name = "finance"
token = "{FINANCE_TOKEN}"
scopes = ["read", "operate"]
groups = ["finance"]

[[auth.tokens]]
name = "auditor"
token = "{AUDITOR_TOKEN}"
scopes = ["operate"]
groups = ["audit"]

[policy]
files = ["policies.cedar"]

[policy.requests.spend]
amount = "decimal"
payee = "String"
invoice = "String?"
"""


def write_policy(directory: Path, text: str = POLICY) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "policies.cedar"
    path.write_text(text)
    return path


def payment(amount: float | int, payee: str = "acme", invoice: str | None = None) -> str:
    """A `spend` request as an agent writes it."""
    import json

    body: dict[str, object] = {"amount": amount, "payee": payee}
    if invoice is not None:
        body["invoice"] = invoice
    return json.dumps(body)
