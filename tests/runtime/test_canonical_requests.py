"""A real agent's http_fetch decided by the policy set: what the policy judged, the request the
journal holds and hashes, what a person sees and what the receiver got are one request.

The agent (agents/hostile, case `fetch`) asks for the URL spellings that used to get past a
permit on `/public/*` and a forbid on `/admin/*` or on a host: dot segments, percent-encoded
dots, an upper-case scheme and host, a trailing dot, credentials in the URL."""

from __future__ import annotations

from projections.approvals import hash_request
from tests.policy_support import write_policy
from tests.runtime.test_hostile_agents import hostile_toml, new_task, outcome, recorder
from tests.runtime.test_runtime_node import journal, start_node

POLICY = """
@id("public")
permit (principal, action == Action::"http_fetch", resource)
when { context.request.url like "*/public/*" };

@id("no-admin")
@reason("the admin API is off limits")
forbid (principal, action == Action::"http_fetch", resource)
when { context.request.url like "http://127.0.0.1:PORT/admin/*" };

@id("not-by-name")
forbid (principal, action == Action::"http_fetch", resource)
when { context.request.url like "http://localhost:*" };
"""


async def test_the_request_judged_is_the_request_journaled_and_fetched(
    aiohttp_client, aiohttp_server, tmp_path, built_agents
):
    target_app, seen = recorder()
    target = await aiohttp_server(target_app)
    port = target.port
    write_policy(tmp_path, POLICY.replace("PORT", str(port)))
    toml = hostile_toml(
        built_agents,
        f"""[agents.capabilities]
http_fetch = true
[agents.approval]
http_fetch = "policy"
timeout_secs = 2
[agents.http]
allow_hosts = ["127.0.0.1:{port}", "localhost:{port}"]
""",
        '\n[policy]\nfiles = ["policies.cedar"]\n',
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)

    async def fetch(url: str) -> dict:
        done = await outcome(app, await new_task(client, "fetch", request={"url": url}))
        assert done["type"] == "task.completed", done
        return done["output"]

    base = f"http://127.0.0.1:{port}"
    forbidden = {
        f"{base}/public/../admin/x": f"{base}/admin/x",
        f"{base}/public/%2e%2e/admin/x": f"{base}/admin/x",
        f"{base}/public/%2E%2E/%2E%2E/admin/x": f"{base}/admin/x",
        f"HTTP://LOCALHOST:{port}/public/a": f"http://localhost:{port}/public/a",
        f"http://localhost.:{port}/public/a": f"http://localhost:{port}/public/a",
    }
    for asked, canonical in forbidden.items():
        answer = await fetch(asked)
        assert answer["error_kind"] == "HostError_ApprovalDenied", (asked, answer)
        requested = journal(app, "hostile", "approval.requested")[-1]
        # the person, the hash and the journal see the form that would have been fetched
        assert requested["request"] == f'{{"url": "{canonical}"}}'
        assert requested["request_hash"] == hash_request(requested["request"])
        assert canonical in requested["detail"]
    assert seen == []  # none of them reached the receiver

    credentials = await fetch(f"http://user:secret@127.0.0.1:{port}/public/a")
    assert credentials["error_kind"] == "HostError_Failed"
    assert "credentials" in credentials["error"] and "secret" not in credentials["error"]
    assert len(journal(app, "hostile", "approval.requested")) == len(forbidden)

    permitted = await fetch(f"{base}/public/./a/../b?q=1#fragment")
    assert permitted["result"]["status"] == 200
    (got,) = seen
    assert got["path"] == "/public/b" and got["query"] == {"q": "1"}
    requested = journal(app, "hostile", "approval.requested")[-1]
    assert requested["request"] == f'{{"url": "{base}/public/b?q=1"}}'
    (performed,) = journal(app, "hostile", "action.performed")
    assert performed["url"] == f"{base}/public/b?q=1"
    (decided,) = [
        d for d in journal(app, "hostile", "approval.decided") if d["id"] == requested["id"]
    ]
    assert decided["decision"] == "approve"
