"""Consent (node/placement/consent.py): what a placed agent gets on a node is its definition
bounded by that node's operator's word; a replicated definition may ask for less, never more."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from node.config.model import HostingConfig
from node.placement.consent import Consent
from projections import catalogue as c

LIMITS = c.AgentLimits(
    tick_interval_ms=50, fuel_per_tick=10**10, memory_limit_mb=4096, tick_timeout_ms=60_000
)


def definition(**fields) -> c.AgentDefinition:
    base = {"component": "registry:payer@1.0.0", "sha256": "sha256:" + "a" * 64, "limits": LIMITS}
    return c.AgentDefinition(**(base | fields))


def hosting(**fields) -> Consent:
    return Consent.of_hosting(msgspec.convert({"agent": "payer", **fields}, HostingConfig))


def test_a_definition_gets_no_capability_the_consent_does_not_enable():
    asked = definition(capabilities={"spend": True, "http_fetch": True, "mail": False})
    got = hosting(capabilities={"spend": True}).bound(asked)
    assert got.capabilities == {"spend": True, "http_fetch": False, "mail": False}


def test_the_stricter_gate_holds_true_over_policy_over_none():
    asked = definition(
        capabilities={"spend": True, "refund": True, "read": True, "ping": True},
        approval={"refund": "policy", "read": True, "timeout_secs": 900},
    )
    consent = hosting(
        capabilities={"spend": True, "refund": True, "read": True, "ping": True},
        approval={"spend": "policy", "refund": True, "timeout_secs": 60},
    )
    got = consent.bound(asked)
    assert got.approval == {"spend": "policy", "refund": True, "read": True, "timeout_secs": 60}
    ungated = hosting(capabilities={"spend": True}).bound(
        definition(capabilities={"spend": True}, approval={"spend": "policy"})
    )
    assert ungated.approval == {"spend": "policy"}  # a definition's gate is never dropped


def test_limits_grants_hosts_and_mcp_are_the_smaller_of_the_two():
    asked = definition(
        grant_domains=["payments", "mail"], allow_hosts=["a.example", "b.example"], mcp=True
    )
    got = hosting(
        grants={"domains": ["payments"]}, http={"allow_hosts": ["b.example"]}, mcp=False
    ).bound(asked)
    assert got.grant_domains == ["payments"] and got.allow_hosts == ["b.example"]
    assert got.mcp is False
    assert got.limits == c.AgentLimits(
        tick_interval_ms=100,
        fuel_per_tick=2_000_000_000,
        memory_limit_mb=64,
        tick_timeout_ms=10_000,
    )


def test_a_node_is_eligible_only_for_domains_it_consents_to_and_serves_and_pinned_components():
    asked = definition(grant_domains=["payments"])
    assert "does not grant" in hosting().refusal(asked, ["payments"])
    consent = hosting(grants={"domains": ["payments"]})
    assert "no secrets" in consent.refusal(asked, [])
    assert consent.refusal(asked, ["payments"]) is None
    pinned = hosting(grants={"domains": ["payments"]}, components=["sha256:" + "b" * 64])
    assert "not one this node allows" in pinned.refusal(asked, ["payments"])


def test_a_consent_naming_an_owner_refuses_another_nodes_agent_of_that_name():
    """Consent names whose agent (issue 51): node-x's own `payer` is not node-a's."""
    asked = definition(grant_domains=["payments"])
    consent = hosting(owner="node-a", grants={"domains": ["payments"]})
    assert consent.refusal(asked, ["payments"], owner="node-a") is None
    refused = consent.refusal(asked, ["payments"], owner="node-x")
    assert refused == "it is owned by 'node-x', not 'node-a', the owner its consent (hosting) names"
    assert hosting().refusal(definition(), [], owner="node-x") is None  # a bare entry: any owner


def test_an_agent_handed_to_this_node_is_its_own():
    consent = hosting(owner="node-a")
    assert consent.refusal(definition(), [], owner="node-b", here="node-b") is None
    assert "owned by 'node-b'" in consent.refusal(definition(), [], owner="node-b", here="node-c")


def test_inference_is_a_capability_consent_bounds_with_the_models_both_name():
    asked = definition(
        capabilities={"inference": True},
        approval={"inference": "policy"},
        inference_models=["small", "big"],
        inference_default="big",
    )
    got = hosting(capabilities={"inference": True}, inference={"models": ["small"]}).bound(asked)
    assert got.capabilities == {"inference": True} and got.approval == {"inference": "policy"}
    assert got.inference_models == ["small"] and got.inference_default is None
    refused = hosting().bound(asked)  # no consent to inference: not-permitted here
    assert refused.capabilities == {"inference": False} and refused.inference_models == []


@settings(max_examples=60, deadline=None)
@given(
    wanted=st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
    consented=st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
    default=st.sampled_from([None, "a", "b", "c", "d"]),
    enabled=st.booleans(),
)
def test_a_bound_definition_never_uses_a_model_either_side_did_not_name(
    wanted, consented, default, enabled
):
    asked = definition(
        capabilities={"inference": True}, inference_models=wanted, inference_default=default
    )
    consent = hosting(capabilities={"inference": enabled}, inference={"models": consented})
    got = consent.bound(asked)
    assert set(got.inference_models) <= set(wanted) & set(consented)
    assert got.inference_default is None or got.inference_default in got.inference_models
    assert got.capabilities["inference"] is enabled
