"""The policy set on single requests, at chosen times: the documented examples, the fields a
request gives, the task and the clock; what cannot be judged asks people."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime

import pytest

from node.config.model import ConfigError
from node.policy.engine import TaskFacts, evaluate
from node.policy.policyset import load_policy_set
from projections.catalogue import ApproverSlot
from tests.policy_support import POLICY_TOML
from tests.support import ROOT, make_config

# the tests' config (a finance token, spend's fields) with the examples' file and time zone
EXAMPLES_TOML = POLICY_TOML.replace(
    'files = ["policies.cedar"]', 'files = ["payments.cedar"]\ntimezone = "Europe/Berlin"'
)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """docs/approvals.md's examples, as examples/policies/payments.cedar holds them."""
    directory = tmp_path_factory.mktemp("examples")
    shutil.copy(ROOT / "examples/policies/payments.cedar", directory / "payments.cedar")
    return load_policy_set(make_config(directory, EXAMPLES_TOML))


def pay(amount, payee="acme-supplies"):
    return json.dumps({"amount": amount, "payee": payee, "memo": "not declared: not shown"})


WEDNESDAY_10 = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)  # 10:00 in Berlin
SATURDAY_10 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
WEDNESDAY_8 = datetime(2026, 11, 25, 7, 30, tzinfo=UTC)  # 8:30 in Berlin, 7:30 in UTC


def test_the_documented_examples_decide_as_documented(examples):
    small = evaluate(examples, "payer", "spend", pay(3.5), WEDNESDAY_10)
    assert (small.outcome, small.ids) == ("permit", ("small-payments",))
    assert [r.budget.text for r in small.budgets] == ["amount 100 per day"]
    unknown = evaluate(examples, "payer", "spend", pay(3.5, "mallory"), WEDNESDAY_10)
    assert (unknown.outcome, unknown.reason) == ("ask", "no policy decides this spend request")
    large = evaluate(examples, "payer", "spend", pay(2500), WEDNESDAY_10)
    assert large.outcome == "ask" and large.ids == ("two-approvers-above-1000",)
    assert large.approvers == (ApproverSlot(count=1), ApproverSlot(count=1, group="finance"))
    weekend = evaluate(examples, "payer", "spend", pay(3.5), SATURDAY_10)
    assert (weekend.outcome, weekend.ids) == ("forbid", ("office-hours",))
    assert weekend.reason == "payments are made on weekdays from 9:00 to 17:00 only"
    # the forbid wins over the rule that asks two people
    assert evaluate(examples, "payer", "spend", pay(2500), WEDNESDAY_8).outcome == "forbid"


def test_the_time_zone_is_the_configs(examples, tmp_path):
    nine_thirty_utc = datetime(2026, 11, 25, 9, 30, tzinfo=UTC)
    assert evaluate(examples, "payer", "spend", pay(3), WEDNESDAY_8).outcome == "forbid"
    shutil.copy(ROOT / "examples/policies/payments.cedar", tmp_path / "payments.cedar")
    utc = load_policy_set(make_config(tmp_path, EXAMPLES_TOML.replace("Europe/Berlin", "UTC")))
    assert evaluate(utc, "payer", "spend", pay(3), nine_thirty_utc).outcome == "permit"
    assert utc.digest != examples.digest  # the zone is part of what the set's hash covers


def policy_set(tmp_path, text, requests='[policy.requests.spend]\namount = "decimal"\n'):
    (tmp_path / "p.cedar").write_text(text)
    return load_policy_set(make_config(tmp_path, f'[policy]\nfiles = ["p.cedar"]\n{requests}'))


def test_what_the_policies_cannot_judge_asks_people(examples, tmp_path):
    at = WEDNESDAY_10
    missing = evaluate(examples, "payer", "spend", json.dumps({"amount": 3}), at)
    assert missing.reason == (
        "the policies cannot judge this request: request.payee is missing (declared String)"
    )
    assert evaluate(examples, "payer", "spend", "pay 3 EUR", at).outcome == "ask"
    deep = evaluate(examples, "payer", "spend", "[" * 100_000, at)  # RecursionError in json
    assert deep.outcome == "ask" and "not JSON" in deep.reason
    fine = evaluate(examples, "payer", "spend", pay(3.00001), at)
    assert "more than 4 decimal places" in fine.reason  # never rounded into a permit
    other = evaluate(examples, "payer", "refund", pay(3), at)
    assert other.reason.startswith("no policy can read refund requests")
    # a forbid that errs at evaluation is skipped by Cedar: the request asks, never permits
    erring = policy_set(
        tmp_path,
        '@id("any") permit (principal, action, resource);\n'
        '@id("huge") forbid (principal, action == Action::"spend", resource)\n'
        "when { context.request.count * 4611686018427387904 > 0 };\n",
        '[policy.requests.spend]\ncount = "Long"\n',
    )
    ruling = evaluate(erring, "payer", "spend", json.dumps({"count": 4}), at)
    assert ruling.outcome == "ask" and "could not be evaluated" in ruling.reason


def test_http_fetch_the_task_and_its_caller_are_in_the_context(tmp_path):
    policies = policy_set(
        tmp_path,
        '@id("reads") permit (principal == Agent::"reader", action == Action::"http_fetch",'
        " resource)\n"
        'when { context.request.method == "GET" && context.request.url like '
        '"https://api.example.com/*" };\n'
        '@id("ops-tasks") permit (principal, action == Action::"spend", resource)\n'
        'when { context has task && context.task has caller && context.task.caller == "ops" };\n',
    )
    at = WEDNESDAY_10
    get = json.dumps({"url": "https://api.example.com/v1/rates"})  # GET when absent
    assert evaluate(policies, "reader", "http_fetch", get, at).outcome == "permit"
    post = json.dumps({"url": "https://api.example.com/v1/rates", "method": "post"})
    assert evaluate(policies, "reader", "http_fetch", post, at).outcome == "ask"
    assert evaluate(policies, "other", "http_fetch", get, at).outcome == "ask"
    spend = json.dumps({"amount": 1})
    assert evaluate(policies, "payer", "spend", spend, at, TaskFacts("t-1", "ops")).outcome == (
        "permit"
    )
    by_agent = TaskFacts("t-2", from_agent="ops")
    assert evaluate(policies, "payer", "spend", spend, at, by_agent).outcome == "ask"
    assert evaluate(policies, "payer", "spend", spend, at).outcome == "ask"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("permit (principal, action, resource);", 'add @id("...")'),
        (
            '@id("a") permit (principal, action, resource);\n@id("a") forbid (principal, action, '
            "resource);",
            "@id('a') names two policies",
        ),
        ('@id("f") @approvers("2") forbid (principal, action, resource);', "not a forbid"),
        ('@id("b") @approvers("two") permit (principal, action, resource);', "@approvers:"),
        (
            '@id("c") @budget("amount 5 per fortnight") permit (principal, action == '
            'Action::"spend", resource);',
            "@budget: period 'fortnight'",
        ),
        (
            '@id("d") @approvers("1 from nobody") permit (principal, action, resource);',
            "names group 'nobody'",
        ),
        ('@id("e") permit (principal == ?principal, action, resource);', "templates"),
        ("permit (principal, action resource);", "not Cedar"),
    ],
)
def test_a_policy_set_that_does_not_check_is_refused_saying_why(tmp_path, text, problem):
    with pytest.raises(ConfigError) as refused:  # the node does not start on it
        policy_set(tmp_path, text)
    assert problem in str(refused.value)
