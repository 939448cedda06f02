"""The pure parts of inference: the config of models, an agent's requests (hostile: held by a
property test), rate limits, and the Anthropic adapter against a server that misbehaves."""

from __future__ import annotations

import json
import os
import tomllib

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.config.load import parse_config
from node.config.model import AgentInference, ConfigError, InferenceSection
from node.inference import anthropic
from node.inference.models import catalogue, choose, cost_text, per_token_nanos
from node.inference.ratelimit import RateLimits
from node.inference.request import parse
from node.runtime.hostapi import HostError
from tests.llm_support import LLM, Reply

BASE = '[node]\nname = "n"\n'


def config(text: str, tmp_path=None):
    raw = tomllib.loads(BASE + text)
    raw["base_dir"] = str(tmp_path or ".")
    return parse_config(raw)


def test_models_by_alias_and_the_old_routes_as_two_of_them():
    section = config(
        """
[inference]
local_url = "http://127.0.0.1:1/v1"
cloud_url = "https://api.example.net/v1"
cloud_api_key_env = "CLOUD_KEY"
[inference.models.big]
provider = "anthropic"
base_url = "https://api.anthropic.com/v1"
model = "claude-x"
input_price = 3
output_price = 15.125
route = "cloud"
"""
    ).inference
    models = catalogue(section)
    assert set(models) == {"local", "cloud", "big"}
    assert models["cloud"].route == "cloud" and models["cloud"].api_key_env == "CLOUD_KEY"
    assert models["big"].output_nanos == 15125 and models["big"].cost_nanos(1000, 1000) == 18125000
    assert cost_text(18125000) == "0.018125" and per_token_nanos(0.0004) == 0


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[inference]\ndefault_model = 'nope'", "inference.default_model: 'nope' is no model"),
        (
            "[inference.models.a]\nbase_url = 'ftp://x'\nmodel = 'm'",
            "inference.models.a.base_url: must start with http",
        ),
        (
            "[inference.models.a]\nbase_url = 'http://x'\nmodel = 'm'\napi_key = 'k'\n"
            "api_key_env = 'E'",
            "give only one of api_key, api_key_env or api_key_file",
        ),
        (
            "[[agents]]\nname = 'a'\ncomponent = 'a.wasm'\n[agents.inference]\nmodels = ['x']",
            "agents[0].inference.models: 'x' is no model",
        ),
        (
            "[inference.models.x]\nbase_url = 'http://x'\nmodel = 'm'\n[[agents]]\nname = 'a'\n"
            "component = 'a.wasm'\n[agents.inference]\nmodels = ['x']\ndefault = 'local'",
            "agents[0].inference.default: 'local' is not one of its models",
        ),
    ],
)
def test_a_bad_inference_config_is_refused_naming_the_key(text, said):
    with pytest.raises(ConfigError) as raised:
        config(text)
    assert said in str(raised.value)


def test_an_api_key_file_is_read_and_never_shown(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-secret-0123456789\n")
    os.chmod(key, 0o600)
    text = "[inference.models.a]\nbase_url = 'http://x'\nmodel = 'm'\napi_key_file = 'key'\n"
    assert config(text, tmp_path).inference.models["a"].api_key == "sk-secret-0123456789"
    os.chmod(key, 0o644)
    with pytest.raises(ConfigError) as raised:
        config(text, tmp_path)
    assert "api_key_file" in str(raised.value) and "sk-secret" not in str(raised.value)


def test_an_agent_uses_its_models_or_else_the_nodes_default_alone():
    section = InferenceSection(local_url="http://x", cloud_url="http://y")
    assert choose(None, "a", AgentInference(), section) == "local"
    with pytest.raises(HostError) as raised:
        choose("cloud", "a", AgentInference(), section)
    assert (
        raised.value.kind == "not-permitted" and "inference.models: local" in raised.value.message
    )
    listed = AgentInference(models=["cloud", "local"])
    assert choose(None, "a", listed, section) == "cloud"
    assert choose("local", "a", listed, section) == "local"


def test_the_prompt_form_is_plain_and_a_chat_carries_its_tools():
    plain = parse('{"prompt": "hi", "max_tokens": 5, "route": "cloud"}')
    assert plain.plain and plain.model == "cloud" and plain.messages[0]["content"] == "hi"
    chat = parse(
        json.dumps(
            {
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "user", "content": "u"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "1"},
                ],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": "required",
                "response_format": {"type": "json_schema", "json_schema": {"schema": {}}},
                "temperature": 0.2,
            }
        )
    )
    assert not chat.plain and chat.tool_choice == "required"
    assert chat.tools[0]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert chat.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {}, "strict": False},
    }


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        ("[]", "expected a JSON object"),
        ('{"messages": []}', "list of 1 to 1000"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', "needs a `role`"),
        ('{"messages": [{"role": "tool", "content": "x"}]}', "tool_call_id"),
        ('{"prompt": "x", "max_tokens": 0}', "positive integer"),
        ('{"prompt": "x", "temperature": 3}', "from 0 to 2"),
        ('{"messages": [{"role": "user", "content": "x"}], "tool_choice": "maybe"}', "tool_choice"),
    ],
)
def test_a_bad_request_is_the_agents_clear_error(request_, said):
    with pytest.raises(HostError) as raised:
        parse(request_)
    assert raised.value.kind == "failed" and said in raised.value.message


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    ["messages", "prompt", "tools", "tool_choice", "response_format", "max_tokens", "model"]
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, JSON, max_size=5) | JSON)
def test_any_request_is_parsed_or_refused_with_a_host_error(value):
    """An agent is hostile: whatever JSON it sends is a ChatRequest or a `failed` HostError,
    never another exception (which would trap the agent with a node bug)."""
    try:
        chat = parse(json.dumps(value))
    except HostError as e:
        assert e.kind == "failed"
        return
    assert chat.messages and all(
        m["role"] in ("system", "user", "assistant", "tool") for m in chat.messages
    )


def test_rate_limits_count_requests_and_tokens_in_a_sliding_minute():
    limits = RateLimits(requests_per_minute=2, tokens_per_minute=100)
    assert limits.wait_for("a", 10, now=0.0) == (0.0, "")
    limits.begin("a", now=0.0)
    limits.spent("a", 60, now=1.0)
    limits.begin("a", now=5.0)
    wait, limit = limits.wait_for("a", 10, now=6.0)
    assert wait == pytest.approx(54.0) and limit == "2 requests per minute"
    assert limits.wait_for("b", 10, now=6.0) == (0.0, "")  # per agent
    assert limits.wait_for("a", 10, now=60.5) == (0.0, "")  # the first left the window
    tokens = RateLimits(requests_per_minute=0, tokens_per_minute=100)
    tokens.spent("a", 60, now=1.0)
    tokens.spent("a", 30, now=7.0)
    assert tokens.wait_for("a", 10, now=10.0) == (0.0, "")  # 100: at the limit, not past it
    wait, limit = tokens.wait_for("a", 20, now=10.0)
    assert limit == "100 tokens per minute" and wait == pytest.approx(51.0)
    assert tokens.wait_for("a", 20, now=61.5) == (0.0, "")


async def anthropic_call(aiohttp_server, *replies: Reply):
    llm = LLM()
    llm.script(*replies)
    server = await aiohttp_server(llm.app())
    section = InferenceSection(
        models={
            "c": {  # type: ignore[dict-item]
                "provider": "anthropic",
                "base_url": f"http://127.0.0.1:{server.port}/v1",
                "model": "claude-x",
                "timeout_secs": 0.5,
            }
        }
    )
    import msgspec

    section = msgspec.convert(msgspec.to_builtins(section), InferenceSection)
    model = catalogue(section)["c"]

    class Heard(list):
        def text(self, token):
            self.append(token)

        def tool_call(self, call_id, name):
            self.append((call_id, name))

        def tool_arguments(self, call_id, delta):
            self.append(delta)

    heard = Heard()
    chat = parse('{"messages": [{"role": "user", "content": "hi"}]}')
    async with aiohttp.ClientSession() as session:
        done = await anthropic.complete(session, model, chat, heard)
    return done, heard, llm


async def test_anthropic_streams_text_and_counts_usage(aiohttp_server):
    done, heard, llm = await anthropic_call(
        aiohttp_server, Reply(text=["Hel", "lo"], input_tokens=9, output_tokens=3)
    )
    assert done.text == "Hello" and heard == ["Hel", "lo"]
    assert (done.input_tokens, done.output_tokens, done.finish_reason) == (9, 3, "stop")
    assert llm.asked[0].body["max_tokens"] == 4096 and llm.asked[0].body["stream"] is True


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (Reply(text=["a", "b"], error_after=1), "overloaded mid-stream"),
        (Reply(text=["a", "b"], cut_after=1), "ended before it finished"),
        (Reply(text=["a", "b"], gap=1.0), "no data for 0.5 s"),
        (Reply(status=529, error_body='{"type": "error"}'), "answered 529"),
    ],
)
async def test_anthropic_failures_are_clean_errors(aiohttp_server, reply, said):
    with pytest.raises(HostError) as raised:
        await anthropic_call(aiohttp_server, reply)
    assert said in raised.value.message
