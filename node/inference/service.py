"""The node's inference: which model a call may use, the limits it passes, the provider it goes
to (with a provider's 429 tried again after its Retry-After, never past the run's deadline),
and what it cost. `prepare` runs on the agent's worker thread (no I/O), `complete` on the
event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from node.config.model import AgentConfig, InferenceSection
from node.inference import anthropic, openai
from node.inference.budgets import Exceeded, InferenceBudgets
from node.inference.metering import InferenceMetrics
from node.inference.models import Model, catalogue, choose, cost_bound, cost_text
from node.inference.notices import BudgetNotices, Crossing
from node.inference.ratelimit import LimitRefusal, RateLimits
from node.inference.request import ChatRequest, parse
from node.inference.stream import Completion, Deltas, ProviderError
from node.ops.metrics import NodeMetrics
from node.runtime.hostapi import HostError
from projections import catalogue as c

CAPABILITY = "inference"
ADAPTERS = {"openai": openai.complete, "anthropic": anthropic.complete}


@dataclass(frozen=True)
class Call:
    """One checked call: who asks which model for what, and what it may cost at most."""

    agent: str
    model: Model
    chat: ChatRequest
    max_tokens: int
    estimated_input_tokens: int

    @property
    def estimated_cost_nanos(self) -> int:
        """The most it can cost: its estimated prompt and every token it may generate."""
        return self.model.cost_nanos(self.estimated_input_tokens, self.max_tokens)

    def summary(self) -> dict[str, Any]:
        """What an approval shows and a policy reads (`[policy.requests.inference]`)."""
        return {
            "model": self.model.alias,
            "provider": self.model.provider,
            "provider_model": self.model.model,
            "route": self.model.route,
            "max_tokens": self.max_tokens,
            "estimated_input_tokens": self.estimated_input_tokens,
            "estimated_cost": cost_bound(self.estimated_cost_nanos),
            "messages": len(self.chat.messages),
            "tools": [t["function"]["name"] for t in self.chat.tools],
        }


@dataclass(frozen=True)
class Outcome:
    call: Call
    completion: Completion
    duration_ms: int
    first_token_ms: int | None

    @property
    def cost_nanos(self) -> int:
        done = self.completion
        return self.call.model.cost_nanos(done.input_tokens, done.output_tokens)

    def event(self, trace_id: str = "") -> c.InferenceCompleted:
        done = self.completion
        return c.InferenceCompleted(
            route=self.call.model.route,
            chars=len(done.text),
            model=self.call.model.alias,
            provider_model=done.model,
            input_tokens=done.input_tokens,
            output_tokens=done.output_tokens,
            cost_nanos=self.cost_nanos,
            duration_ms=self.duration_ms,
            finish_reason=done.finish_reason or "",
            tool_calls=len(done.tool_calls),
            trace_id=trace_id,
        )

    def answer(self) -> str:
        """Plain text for the `{"prompt"}` form; the chat form's JSON otherwise."""
        done = self.completion
        if self.call.chat.plain:
            return done.text
        usage = {
            "input_tokens": done.input_tokens,
            "output_tokens": done.output_tokens,
            "total_tokens": done.input_tokens + done.output_tokens,
            "cost": cost_text(self.cost_nanos),
        }
        return json.dumps(
            {
                "message": done.message(),
                "finish_reason": done.finish_reason,
                "usage": usage,
                "model": self.call.model.alias,
                "provider_model": done.model,
            }
        )


class InferenceService:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        config: InferenceSection,
        metrics: NodeMetrics,
        budgets: InferenceBudgets | None = None,
        notices: BudgetNotices | None = None,
    ) -> None:
        self.session = session
        self.config = config
        self.models = catalogue(config)
        self.metrics = InferenceMetrics(metrics)
        self.limits = RateLimits(config.requests_per_minute, config.tokens_per_minute)
        self.budgets = budgets or InferenceBudgets(config.budgets, None, {}, [])
        self.notices = notices
        self._before: dict[int, dict[str, Any]] = {}  # a reserved call's budget uses before it

    # ---- budgets (node/inference/budgets.py), on the event loop -----------------------------
    async def reserve(self, call: Call, approved: bool = False) -> Exceeded | None:
        """The budget the call could pass (nothing reserved), or None: reserved. `approved`:
        people allowed it past its budget; it is reserved all the same."""
        tokens, cost = call.estimated_input_tokens + call.max_tokens, call.estimated_cost_nanos
        before = self.budgets.uses(call.agent)
        exceeded = None if approved else self.budgets.check(call.agent, tokens, cost)
        if approved:
            self.budgets.reserve(call.agent, tokens, cost)
        if exceeded is None:
            self._before[id(call)] = before
        return exceeded

    async def settle(self, call: Call) -> list[Crossing]:
        """The call's charge is folded (or it failed): its reservation ends; the budgets whose
        use it took past 80 % or 100 % are told (once per window: node/inference/notices.py)."""
        tokens, cost = call.estimated_input_tokens + call.max_tokens, call.estimated_cost_nanos
        self.budgets.settle(call.agent, tokens, cost)
        before = self._before.pop(id(call), None)
        crossings = self.budgets.crossed(call.agent, before) if before is not None else []
        for crossing in crossings:
            if self.notices is not None:
                await self.notices.report(crossing)
        return crossings

    def prepare(self, agent: AgentConfig, text: str) -> Call:
        """The call an agent's request makes, or HostError: not-permitted without the
        capability or for a model it may not use; failed for a bad request or an alias this
        node does not serve."""
        if not agent.capabilities.get(CAPABILITY):
            raise HostError(
                "not-permitted",
                f"capability inference is not enabled for agent {agent.name} "
                "(capabilities.inference = true)",
            )
        chat = parse(text)
        alias = choose(chat.model, agent.name, agent.inference, self.config)
        model = self.models.get(alias)
        if model is None:
            raise HostError("failed", f"inference model {alias} is not configured on this node")
        return Call(
            agent=agent.name,
            model=model,
            chat=chat,
            max_tokens=chat.max_tokens or model.max_tokens,
            estimated_input_tokens=chat.estimated_input_tokens(),
        )

    async def complete(self, call: Call, deltas: Deltas, deadline_secs: float) -> Outcome:
        """Ask the provider within `deadline_secs` (what the run has left)."""
        started = time.monotonic()
        deadline = started + max(deadline_secs, 0.0)
        model = call.model
        self.metrics.requests.labels(route=model.route).inc()
        try:
            await self._admit(call, deadline)
        except HostError:
            self.metrics.failed(call.agent, model.alias, refused=True)
            raise
        try:
            done = await self._ask(call, deltas, deadline)
        except HostError:
            self.metrics.failed(call.agent, model.alias, refused=False)
            raise
        seconds = time.monotonic() - started
        self.limits.spent(call.agent, done.input_tokens + done.output_tokens)
        outcome = Outcome(
            call=call,
            completion=done,
            duration_ms=int(seconds * 1000),
            first_token_ms=None
            if done.first_token_at is None
            else int((done.first_token_at - started) * 1000),
        )
        self.metrics.answered(
            call.agent,
            model.alias,
            done.input_tokens,
            done.output_tokens,
            outcome.cost_nanos,
            seconds,
        )
        return outcome

    async def _admit(self, call: Call, deadline: float) -> None:
        """The agent's rate limits: wait for room when it comes before the deadline."""
        while True:
            wait, limit = self.limits.wait_for(call.agent, call.estimated_input_tokens)
            if wait <= 0:
                self.limits.begin(call.agent)
                return
            if time.monotonic() + wait > deadline:
                raise LimitRefusal(
                    f"inference rate limit of agent {call.agent}: {limit}; room in {wait:.1f} s, "
                    "after the run's deadline",
                )
            await asyncio.sleep(wait)

    async def _ask(self, call: Call, deltas: Deltas, deadline: float) -> Completion:
        adapter = ADAPTERS[call.model.provider]
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HostError("failed", f"inference {call.model.alias}: past the run's deadline")
            try:
                async with asyncio.timeout(left):
                    return await adapter(self.session, call.model, call.chat, deltas)
            except TimeoutError:
                alias = call.model.alias
                raise HostError(
                    "failed", f"inference {alias} did not finish before the run's deadline"
                ) from None
            except ProviderError as e:
                retry = e.retry_after
                if retry is None or attempt >= self.config.retries:
                    raise
                if time.monotonic() + retry >= deadline:
                    raise ProviderError(
                        f"{e.message} (Retry-After {retry:g} s passes the run's deadline)",
                        e.status,
                    ) from None
                attempt += 1
                await asyncio.sleep(retry)
