"""Environment secret names are unambiguous, or the config is refused at start."""

from __future__ import annotations

import pytest

from node.config.load import parse_config
from node.config.model import ConfigError, secret_env_name


def config(domains_a: list[str], domains_b: list[str], secrets: dict | None = None):
    raw = {
        "node": {"name": "n"},
        "agents": [
            {"name": "a", "component": "a.wasm", "grants": {"domains": domains_a}},
            {"name": "b", "component": "b.wasm", "grants": {"domains": domains_b}},
        ],
        "secrets": secrets or {},
    }
    return parse_config(raw)


def test_overlapping_domains_are_refused_naming_both():
    with pytest.raises(ConfigError) as raised:
        config(["payments"], ["payments_admin"])
    message = str(raised.value)
    assert "'payments' and 'payments_admin' are ambiguous" in message
    assert "AGENT_SECRET_PAYMENTS_ADMIN_<KEY>" in message
    with pytest.raises(ConfigError):
        config([], [], secrets={"payments": {}, "payments_admin": {"api_key": "v"}})


def test_distinct_domains_are_accepted():
    assert config(["payments"], ["billing", "paymentsadmin"]).agents[1].grants.domains


def test_names_that_upper_casing_would_merge_have_no_environment_variable():
    assert secret_env_name("payments", "api_key") == "AGENT_SECRET_PAYMENTS_API_KEY"
    for domain, key in [("payments", "API_KEY"), ("payments", "api.key"), ("Pay", "k")]:
        assert secret_env_name(domain, key) is None
    # so these two can never read the same variable
    assert secret_env_name("payments", "admin_api_key") != secret_env_name(
        "payments.admin", "api_key"
    )
