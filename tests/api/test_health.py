from node.ops.metrics import NodeMetrics
from tests.support import READ_TOKEN, auth

FAMILIES = {
    "svc_build_info": ("gauge", {"version", "commit"}),
    "svc_agents_total": ("gauge", set()),
    "svc_agent_restarts_total": ("counter", {"agent"}),
    "svc_inference_requests_total": ("counter", {"route"}),
    "svc_fuel_consumed_total": ("counter", {"agent"}),
    "svc_sync_envelopes_total": ("counter", set()),
    "svc_approvals_pending": ("gauge", set()),
    "svc_http_request_duration_seconds": ("histogram", set()),
}


async def test_health_is_public(client):
    response = await client.get("/api/v1/health")
    assert response.status == 200
    assert await response.json() == {"status": "ok"}


async def test_metrics_need_a_token(client):
    response = await client.get("/api/v1/metrics")
    assert response.status == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.content_type == "application/problem+json"


async def test_metrics_expose_all_eight_families_with_types_and_labels(client):
    await client.get("/api/v1/health")
    response = await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    assert "charset=utf-8" in response.headers["Content-Type"]
    text = await response.text()
    for family, (kind, labels) in FAMILIES.items():
        assert f"# TYPE {family} {kind}" in text, family
        assert f"# HELP {family} " in text, family
        samples = [
            line
            for line in text.splitlines()
            if line.startswith(family) and not line.startswith(family + "_created")
        ]
        if "agent" in labels:
            continue  # no agents configured here; see the per-agent test below
        assert samples, family
        if kind != "histogram":
            for line in samples:
                found = (
                    {
                        pair.split("=")[0]
                        for pair in line[line.find("{") + 1 : line.find("}")].split(",")
                    }
                    if "{" in line
                    else set()
                )
                assert found == labels, (family, line)
    assert 'svc_build_info{commit="' in text
    count = [
        line
        for line in text.splitlines()
        if line.startswith("svc_http_request_duration_seconds_count")
    ]
    assert float(count[0].split()[-1]) >= 1


def test_per_agent_families_have_a_sample_for_every_configured_agent():
    text = NodeMetrics(["payer", "worker"]).render().decode()
    for agent in ("payer", "worker"):
        assert f'svc_agent_restarts_total{{agent="{agent}"}} 0.0' in text
        assert f'svc_fuel_consumed_total{{agent="{agent}"}} 0.0' in text
