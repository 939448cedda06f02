"""`agent new` → `agent build` (real componentize-py) → `agent test` (the node's runtime), and
the project's own test, all outside the repo, as an author runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.authoring.kit_support import (
    agent,
    agent_test,
    answered_by_the_tools_template,
    author_env,
    of_type,
)
from tests.support import ROOT


@pytest.mark.timeout(900)
def test_new_build_test_a_python_agent_outside_the_repo(tmp_path):
    made = agent("new", "word-count", "--dir", str(tmp_path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "word-count"
    assert sorted(p.name for p in project.iterdir()) == [
        ".gitignore",
        "README.md",
        "agent.toml",
        "app.py",
        "test_app.py",
        "wit",
    ]
    wit = (project / "wit" / "agent.wit").read_text()
    assert "package agent-runtime:agent@0.3.0;" in wit and "world agent {" in wit

    built = agent("build", cwd=project)  # the project is the current folder
    assert built.returncode == 0, built.stderr
    component = project / "build" / "word-count.wasm"
    assert component.read_bytes()[:8] == b"\0asm\x0d\x00\x01\x00"  # a component, not a module
    assert f"built {component}" in built.stdout

    status, report = agent_test(
        project, "--ticks", "2", "--input", json.dumps({"text": "My password: the the"})
    )
    assert status == 0 and report["ok"], report
    assert [e["message"] for e in of_type(report, "log")] == [
        "tick 1",
        "tick 2",
        "task task-1 from operator: 4 words",
    ]
    assert report["state"] == {"ticks": "2"}
    assert report["task"]["status"] == "completed"
    assert report["task"]["output"] == {
        "words": 4,
        "lines": 1,
        "top": [["the", 2], ["my", 1], ["password", 1]],
        "quarantine": "not enabled",  # its invoke without the capability: not-permitted
    }
    (finding,) = of_type(report, "finding")
    assert finding["severity"] == "medium" and finding["detail"] == "task task-1: password"
    runs = [(e["kind"], e["error"]) for e in of_type(report, "run.finished")]
    assert runs == [("tick", None), ("tick", None), ("task", None), ("list-tools", None)]
    assert all(e["fuel"] > 0 for e in of_type(report, "run.finished"))
    assert report["tools"][0]["name"] == "count_words"
    assert report["tools"][0]["input_schema"]["required"] == ["text"]

    # the template's approval-gated invoke: --gate enables `quarantine` behind an approval
    status, report = agent_test(
        project, "--input", json.dumps({"text": "a secret"}), "--gate", "quarantine=approve"
    )
    assert status == 0 and report["task"]["output"]["quarantine"] == "done", report
    (approval,) = of_type(report, "approval")
    assert approval == {**approval, "capability": "quarantine", "decision": "approve"}
    (invoked,) = of_type(report, "invoke")
    assert invoked["request"] == {"task": "task-1", "mentions": ["secret"]}

    # the human report says the same in words
    human = agent("test", "--tool", "count_words", "--arguments", '{"text": "a b a"}', cwd=project)
    assert human.returncode == 0, human.stderr
    assert "   log info: tick 1" in human.stdout
    assert 'tool count_words: ok: {"words":3,"lines":1,"top":[["a",2],["b",1]]}' in human.stdout

    # the test the project ships, run the way its README says
    own = subprocess.run(
        [sys.executable, "-m", "unittest", "-v"],
        cwd=project,
        capture_output=True,
        text=True,
        env=author_env(),
        timeout=600,
    )
    assert own.returncode == 0, own.stderr
    assert "Ran 6 tests" in own.stderr and "OK" in own.stderr


def test_the_tools_template_is_a_tool_calling_agent(tmp_path, built_agents):
    """`agent new --template tools`: its app.py is agents/tools_template's (built by the
    suite, so this test need not build it again), answered from its own answers.json."""
    made = agent("new", "forecaster", "--template", "tools", "--dir", str(tmp_path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "--infer-file answers.json" in made.stdout
    project = tmp_path / "forecaster"
    assert sorted(p.name for p in project.iterdir()) == [
        ".gitignore",
        "README.md",
        "agent.toml",
        "answers.json",
        "app.py",
        "test_app.py",
        "wit",
    ]
    built_from = ROOT / "agents" / "tools_template" / "app.py"
    source = (project / "app.py").read_text().replace("forecaster", "tools_template")
    assert source == built_from.read_text(), "agents/tools_template/app.py is the template's"
    report = answered_by_the_tools_template(
        project, built_agents["tools_template"], {"question": "Weather in Oslo?"}
    )
    asked = [e["request"] for e in of_type(report, "inference")]
    assert asked[0]["tools"][0]["function"]["name"] == "forecast"
    assert asked[0]["max_tokens"] == 512
    assert asked[1]["messages"][-1]["content"] == json.dumps({"forecast": "sunny, 21 C"})
