"""Approval notifications (issue 47 item 4): a request that waits for people is announced to
a webhook signed in the Standard Webhooks format (checked with the `standardwebhooks`
verifier) and by mail through Apprise to a local SMTP server (aiosmtpd), escalated before it
times out, and never announced when the same write decided it; a node with the real cashier
agent, whose payments wait for approval."""

from __future__ import annotations

import base64
import email
import json
from email.policy import default as default_policy

import pytest
from aiosmtpd.controller import Controller
from standardwebhooks.webhooks import Webhook

from eventstore.store import NewEvent
from node.delivery.service import OUTBOX
from projections import catalogue as c
from tests.delivery.support import DELIVERY_TOML, rpc, send_params, start_receiver
from tests.polling import until
from tests.protocol_support import cashier_toml, start_node, started
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth, free_port

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.messages.append(email.message_from_bytes(envelope.content, policy=default_policy))
        return "250 OK"


@pytest.fixture
def mailbox():
    box = Mailbox()
    controller = Controller(box, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield box, controller.port
    controller.stop()


@pytest.fixture
async def receiver(aiohttp_server):
    return await start_receiver(aiohttp_server)


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents, receiver, mailbox):
    _, smtp_port = mailbox
    toml = (
        cashier_toml("cashier", built_agents["cashier"], timeout=3)
        + DELIVERY_TOML
        + f"""
[notifications]
escalate_before_secs = 2
console_url = "https://console.example/console/"

[[notifications.channels]]
name = "approvers"
kind = "webhook"
url = "{receiver.url}/approvals"
secret = "{SECRET}"
on = ["requested", "escalated"]

[[notifications.channels]]
name = "mail"
kind = "apprise"
url = "mailto://127.0.0.1:{smtp_port}?from=node@example.com&to=ops@example.com"
capabilities = ["spend"]

[[notifications.channels]]
name = "elsewhere"
kind = "webhook"
url = "{receiver.url}/elsewhere"
secret = "{SECRET}"
agents = ["payer"]
"""
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "cashier")
    return node


async def pay(http, node, payment: dict) -> str:
    params = send_params({"pay": payment}, returnImmediately=True)
    answer = await rpc(http, node.url, "cashier", "SendMessage", params, OPERATE_TOKEN)
    return answer["result"]["task"]["id"]


async def notifications(http, node, approval_id: str) -> dict:
    answer = await http.get(
        f"{node.url}/api/v1/approvals/{approval_id}/notifications", headers=auth(READ_TOKEN)
    )
    assert answer.status_code == 200, answer.text
    return {n["channel"]: n["delivery"] for n in answer.json()}


def verified(received) -> dict:
    """The body, once the standardwebhooks verifier accepted its signature."""
    return Webhook(SECRET).verify(received.body, received.headers)


async def test_a_waiting_request_is_announced_signed_mailed_and_escalated(
    node, receiver, mailbox, http
):
    box, _ = mailbox
    await pay(http, node, {"invoice": "INV-\x1b[31mRED", "amount_cents": 990})
    await receiver.wait_for(1, "/approvals")
    requested = verified(receiver.at("/approvals")[0])
    assert requested["type"] == "approval.requested"
    data = requested["data"]
    approval_id = data["id"]
    assert data["agent"] == "cashier" and data["capability"] == "spend"
    assert "\\u001b[31mRED" in data["summary"] and "\x1b" not in data["summary"]
    assert data["console_url"] == f"https://console.example/console/#/inbox/{approval_id}"
    assert data["node"] == "node-a" and data["timeout_secs"] == 3
    headers = receiver.at("/approvals")[0].headers
    assert headers["webhook-id"].startswith("msg_")

    await until(lambda: box.messages, 15, "the mail")
    mail = box.messages[0]
    assert "cashier: spend waits for an approver" in mail["Subject"]
    text = mail.get_body(preferencelist=("plain", "html")).get_content()
    assert f"#/inbox/{approval_id}" in text and "\x1b" not in text

    # before it times out (3 s), the escalation: to the channel whose `on` has it
    await receiver.wait_for(2, "/approvals")
    escalated = verified(receiver.at("/approvals")[1])
    assert escalated["type"] == "approval.escalated" and escalated["data"]["id"] == approval_id
    assert receiver.at("/approvals")[1].headers["webhook-id"] != headers["webhook-id"]

    state = await until(lambda: _all_sent(http, node, approval_id), 10, "the deliveries recorded")
    assert state["approvers"]["delivered"] == 2 and state["mail"]["delivered"] == 1
    assert state["elsewhere"] is None  # its filter names another agent
    assert not receiver.at("/elsewhere")
    assert len(box.messages) == 1  # mail: requested only


async def _all_sent(http, node, approval_id):
    state = await notifications(http, node, approval_id)
    ok = state["approvers"] and state["approvers"]["delivered"] == 2 and state["mail"]
    return state if ok and state["mail"]["delivered"] == 1 else None


async def test_a_decided_request_is_not_escalated_and_a_policy_decision_never_announced(
    node, receiver, http
):
    await pay(http, node, {"invoice": "INV-2"})
    await receiver.wait_for(1, "/approvals")
    approval_id = json.loads(receiver.at("/approvals")[0].body)["data"]["id"]
    decided = await http.post(
        f"{node.url}/api/v1/approvals/{approval_id}", json={"decision": "approve"}
    )
    assert decided.status_code == 200, decided.text

    async def resolved():
        state = (await notifications(http, node, approval_id))["approvers"]
        return state if state and state["closed"] == "resolved" else None

    state = await until(resolved, 10, "the request's lane closed")
    assert state["delivered"] == 1 and state["dropped"] == 1 and state["pending"] == 0

    # a request decided in the same write that asked it (a policy's decision) asks nobody
    ctx = node.ctx
    written = await ctx.store.append_many(
        [
            NewEvent(
                "cashier", *c.event_of(c.ApprovalRequested(id="by-policy", capability="spend"))
            ),
            NewEvent(
                "cashier",
                *c.event_of(
                    c.ApprovalDecided(id="by-policy", decision="approve", operator="policy")
                ),
            ),
        ]
    )
    outbox = node.app[OUTBOX]
    await until(lambda: outbox.ingester.cursor >= written[-1].position, 10, "the fold")
    assert await notifications(http, node, "by-policy") == {
        "approvers": None,
        "mail": None,
        "elsewhere": None,
    }
    missing = await http.get(
        f"{node.url}/api/v1/approvals/nope/notifications", headers=auth(READ_TOKEN)
    )
    assert missing.status_code == 404
