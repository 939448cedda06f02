"""Pays invoices through the `spend` capability, which an operator gates with approvals.

Each tick pays the next invoice: `amount` in the currency's units (a decimal, as
examples/policies/payments.cedar reads it: 9.50 fits its small-payments permit) to
`acme-supplies`. The host blocks `invoke` until the policies or an operator decide:
approved -> the payment is recorded and the next invoice follows; denied -> the invoice
is skipped; timed out -> the same invoice is retried on the next tick.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

AMOUNT = 9.5  # EUR: within the example policy's "at most 10 a payment"


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        number = int(host.state_get("next_invoice") or "1")
        invoice = f"INV-{number:04d}"
        request = {
            "invoice": invoice,
            "amount": AMOUNT,
            "currency": "EUR",
            "payee": "acme-supplies",
        }
        try:
            result = host.invoke("spend", json.dumps(request))
        except Err as e:
            self._refused(invoice, number, e.value)
            return
        host.state_set("next_invoice", str(number + 1))
        host.state_set("paid", str(int(host.state_get("paid") or "0") + 1))
        host.log("info", f"paid {invoice}: {result}")

    def _refused(self, invoice: str, number: int, error: types.HostError) -> None:
        if isinstance(error, types.HostError_ApprovalDenied):
            host.log("warn", f"payment of {invoice} denied: {error.value}")
            host.state_set("next_invoice", str(number + 1))
        elif isinstance(error, types.HostError_ApprovalTimeout):
            host.log("info", f"no decision on {invoice} yet, retrying next tick")
        elif isinstance(error, types.HostError_NotPermitted):
            host.report_finding("high", "spend not permitted", f"{invoice}: {error.value}")
        else:
            host.log("error", f"payment of {invoice} failed: {error.value}")

    def handle_task(self, task: types.Task) -> str:
        raise Err("payer does not take tasks")

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
