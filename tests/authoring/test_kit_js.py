"""A JavaScript agent from `agent new --lang js`: componentize-js from npm into the project,
`agent test` in the node's runtime, and the project's own `npm test`."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.authoring.kit_support import (
    BIN,
    agent,
    agent_test,
    answered_by_the_tools_template,
    author_env,
    of_type,
)
from tests.support import ROOT


@pytest.mark.timeout(900)
def test_new_build_test_a_javascript_agent_outside_the_repo(tmp_path):
    made = agent("new", "wc-js", "--lang", "js", "--dir", str(tmp_path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "wc-js"
    assert sorted(p.name for p in project.iterdir()) == [
        ".gitignore",
        "README.md",
        "agent.toml",
        "app.js",
        "app.test.mjs",
        "package.json",
        "wit",
    ]
    assert 'language = "js"' in (project / "agent.toml").read_text()

    built = agent("build", str(project), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert "npm install: componentize-js" in built.stderr
    assert (project / "node_modules" / ".bin" / "componentize-js").exists()
    component = project / "build" / "wc-js.wasm"
    assert component.read_bytes()[:8] == b"\0asm\x0d\x00\x01\x00"

    status, report = agent_test(
        project,
        "--input",
        json.dumps({"text": "a secret, a b"}),
        "--tool",
        "count_words",
        "--arguments",
        '{"text": "x y"}',
    )
    assert status == 0 and report["ok"], report
    assert [e["message"] for e in of_type(report, "log")] == [
        "tick 1",
        "task task-1 from operator: 4 words",
    ]
    assert report["task"]["output"] == {
        "words": 4,
        "lines": 1,
        "top": [["a", 2], ["secret", 1], ["b", 1]],
        "quarantine": "not enabled",  # its invoke without the capability: not-permitted
    }
    assert of_type(report, "finding")[0]["detail"] == "task task-1: secret"
    assert report["tool"] == {
        "name": "count_words",
        "arguments": {"text": "x y"},
        "ok": True,
        "result": {"words": 2, "lines": 1, "top": [["x", 1], ["y", 1]]},
    }
    assert report["state"] == {"ticks": "1"}

    # the project's own tests, as its README says: npm test
    own = subprocess.run(
        [shutil.which("npm") or "npm", "test"],
        cwd=project,
        capture_output=True,
        text=True,
        env=author_env(),
        timeout=600,
    )
    assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-3000:]
    assert "# pass 6" in own.stdout and "# fail 0" in own.stdout


def test_a_javascript_build_without_node_says_what_to_install(tmp_path):
    agent("new", "no-node", "--lang", "js", "--dir", str(tmp_path), cwd=tmp_path)
    env = author_env(PATH=str(BIN))  # agent-node, and no node or npm
    built = agent("build", str(tmp_path / "no-node"), cwd=tmp_path, env=env)
    assert built.returncode == 1
    assert "needs Node.js (20 or newer) and npm on PATH" in built.stderr
    assert "Traceback" not in built.stderr


def test_the_javascript_tools_template_is_a_tool_calling_agent(tmp_path, built_agents):
    """`agent new --lang js --template tools`: its app.js is agents/tools_template_js's (built
    once by the suite's set-up, as the Python template's is, so this test builds nothing),
    run by `agent test` and answered from its own answers.json."""
    made = agent(
        "new", "forecaster", "--lang", "js", "--template", "tools", "--dir", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "--infer-file answers.json" in made.stdout
    project = tmp_path / "forecaster"
    assert "answers.json" in {p.name for p in project.iterdir()}
    built_from = ROOT / "agents" / "tools_template_js" / "app.js"
    source = (project / "app.js").read_text().replace("forecaster", "tools_template_js")
    assert source == built_from.read_text(), "agents/tools_template_js/app.js is the template's"
    report = answered_by_the_tools_template(
        project, built_agents["tools_template_js"], {"question": "Weather in Paris?"}
    )
    asked = [e["request"] for e in of_type(report, "inference")]
    assert asked[0]["tools"][0]["function"]["name"] == "forecast"
    assert asked[0]["max_tokens"] == 512
    assert asked[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call-1",
        "content": json.dumps({"forecast": "sunny, 21 C"}, separators=(",", ":")),
    }
