"""`agent test` with fake grants, against the repo's example agents: capabilities with canned
replies, approvals decided by flags, secrets behind grants (and redacted), inference."""

from __future__ import annotations

import json
import os

import pytest

from node.authoring import harness
from node.authoring.build import is_stale
from node.authoring.project import load
from tests.authoring.kit_support import agent, of_type


@pytest.fixture
def project(tmp_path):
    """A project folder; the components run are the built examples (`--wasm`)."""
    made = agent("new", "demo", "--dir", str(tmp_path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return tmp_path / "demo"


def run(project, wasm, *args: str) -> tuple[int, dict]:
    done = agent("test", str(project), "--json", "--wasm", str(wasm), *args, cwd=project)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_gated_spend_is_decided_by_the_flags(project, built_agents):
    status, report = run(
        project,
        built_agents["payer"],
        "--gate",
        "spend=approve",
        "--capability",
        'spend={"status": 200, "body": {"payment_id": "p-1"}}',
    )
    assert status == 0, report
    assert of_type(report, "approval") == [
        {"type": "approval", "capability": "spend", "decision": "approve"}
    ]
    (call,) = of_type(report, "invoke")
    assert call["capability"] == "spend" and call["request"]["invoice"] == "INV-0001"
    assert call["result"] == {"status": 200, "body": {"payment_id": "p-1"}}
    assert of_type(report, "log")[0]["message"].startswith("paid INV-0001")

    status, denied = run(project, built_agents["payer"], "--gate", "spend=deny")
    assert status == 0
    assert of_type(denied, "invoke")[0]["error"] == "approval-denied: spend denied by operator"

    status, refused = run(project, built_agents["payer"])  # no capability at all
    assert status == 0
    assert of_type(refused, "invoke")[0]["error"].startswith("not-permitted")
    assert of_type(refused, "finding")[0]["title"] == "spend not permitted"


def test_secret_needs_its_grant_and_never_shows(project, built_agents):
    secret = "payments.api_key=s3cr3t-value"
    status, granted = run(
        project, built_agents["secrets_reader"], "--secret", secret, "--grant", "payments"
    )
    assert status == 0, granted
    assert of_type(granted, "secret") == [
        {"type": "secret", "domain": "payments", "key": "api_key"}
    ]
    assert "s3cr3t-value" not in json.dumps(granted)
    assert granted["state"]["secret_status"] == "ok:12"

    status, ungranted = run(project, built_agents["secrets_reader"], "--secret", secret)
    assert of_type(ungranted, "secret")[0]["error"] == "not-permitted: no active grant for payments"
    assert ungranted["state"]["secret_status"] == "denied"


def test_inference_answers_the_given_text(project, built_agents):
    status, report = run(
        project,
        built_agents["inference"],
        "--infer-reply",
        "Three invoices.",
        "--state",
        "route=cloud",
    )
    assert status == 0, report
    assert report["state"]["last_answer"] == "Three invoices."
    assert of_type(report, "inference")[0]["request"]["route"] == "cloud"


def test_a_tool_calling_agent_is_answered_from_an_infer_file(project, built_agents, tmp_path):
    answers = tmp_path / "answers.json"
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    }
    answers.write_text(
        json.dumps(
            [
                {"message": {"content": None, "tool_calls": [call]}, "usage": {"input_tokens": 9}},
                "The sum is 5.",
            ]
        )
    )
    status, report = run(
        project,
        built_agents["tool_caller"],
        "--infer-file",
        str(answers),
        "--input",
        '{"question": "2 + 3?"}',
    )
    assert status == 0, report
    assert report["task"]["output"] == {
        "answer": "The sum is 5.",
        "rounds": 2,
        "input_tokens": 9,
        "output_tokens": 0,
        "tool_calls": 1,
    }
    asked = of_type(report, "inference")
    assert asked[1]["request"]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '{"sum": 5.0}',
    }
    # a third call finds no answer left: the agent's error, not a crash of the kit
    answers.write_text(json.dumps([{"message": {"tool_calls": [call]}}]))
    status, report = run(
        project,
        built_agents["tool_caller"],
        "--infer-file",
        str(answers),
        "--input",
        '{"question": "2 + 3?"}',
    )
    assert "no answer left" in json.dumps(report)


def test_a_load_failure_is_a_reported_fault(project, tmp_path):
    bogus = tmp_path / "bogus.wasm"
    bogus.write_bytes(b"\0asm\x0d\x00\x01\x00garbage")
    status, report = run(project, bogus)
    assert status == 1 and report["fault"]["kind"] == "load"
    assert report["events"][-1]["type"] == "agent.errored"


def test_a_trap_is_reported_with_the_agents_own_words(project, built_agents):
    status, report = run(project, built_agents["mcp_tools"], "--tool", "crash")
    assert status == 1 and not report["ok"]
    assert report["fault"]["kind"] == "trap"
    assert "crash requested" in report["fault"]["error"]
    assert report["tool"]["ok"] is False and "crash requested" in report["tool"]["result"]


def test_a_changed_source_is_rebuilt_before_a_test(project):
    target = load(project)
    assert is_stale(target)  # never built
    target.output.parent.mkdir()
    target.output.write_bytes(b"")
    assert not is_stale(target)
    later = target.output.stat().st_mtime + 5
    os.utime(target.source, (later, later))
    assert is_stale(target)


def test_bad_flags_are_usage_errors(project, built_agents):
    hello = str(built_agents["hello"])
    for args, said in (
        (("--gate", "spend=maybe"), "give NAME=approve, NAME=deny or NAME=timeout"),
        (("--secret", "nodot=1"), "give DOMAIN.KEY=VALUE"),
        (("--input", "[1]"), "--input: give a JSON object"),
        (("--input", "{"), "--input: not JSON"),
        (("--capability", "spend={"), "--capability spend: not JSON"),
        (("--state", "novalue"), "give KEY=VALUE"),
    ):
        done = agent("test", str(project), "--wasm", hello, *args, cwd=project)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)


def test_a_secret_read_is_redacted_from_what_is_shown():
    """As the node keeps a read secret out of its journal, the kit keeps it out of the report."""
    host = harness.KitHost(
        "demo", secrets={("payments", "api_key"): "s3cr3t"}, granted={"payments"}
    )
    assert host.get_secret("payments", "api_key") == "s3cr3t"
    host.log("info", "key is s3cr3t")
    host.state_set("copy", '{"k": "s3cr3t"}')
    assert host.of_type("log")[0]["message"] == "key is [secret:payments/api_key]"
    assert host.state["copy"] == '{"k": "[secret:payments/api_key]"}'
