"""A JavaScript agent from `agent new --lang js`: componentize-js from npm into the project,
`agent test` in the node's runtime, and the project's own `npm test`."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.authoring.kit_support import BIN, agent, agent_test, author_env, of_type


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
