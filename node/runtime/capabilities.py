"""What `invoke` performs once a capability is allowed (and approved, if gated).

`http_fetch` is built in: request {url, method?, headers?, body?} → {status, headers, body},
only to hosts in the agent's `allow_hosts`, never following redirects (a redirect could leave
the allowed hosts). Its URL is put in the client's canonical form first (`canonical_fetch`,
node/web/urls.py): the gate, the policies, the journal and the wire all see that one form.
Any other capability is an action: POSTed as {agent, capability, request} to
`[actions.<capability>] url` when configured, else only journaled (its address is the
operator's, never the request's). An action POST and every fetch but GET and HEAD carry the
call's `Idempotency-Key` (node/runtime/callrecords.py: the same on every node and every repeat
of the call), unless the agent set its own. These coroutines run on the event loop; agent
threads reach them through the host.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from node.config.model import ActionSection
from node.runtime.callrecords import IDEMPOTENCY_HEADER, header_value
from node.runtime.hostapi import HostError
from node.web.urls import CanonicalUrl, UrlRefused, canonical_url

MAX_BODY = 1 << 20
FETCH_TIMEOUT = 30.0
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
_NODE_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}
SAFE_METHODS = frozenset({"GET", "HEAD"})  # no Idempotency-Key: repeating them changes nothing


def canonical_fetch(request: Any, text: str) -> tuple[dict[str, Any], str]:
    """An http_fetch request with its URL in canonical form, and the request's text: the
    agent's own when the URL was canonical already, else the request with the canonical URL
    (what the gate shows and hashes, and what is performed). HostError when refused."""
    if not isinstance(request, dict) or not isinstance(request.get("url"), str):
        raise HostError("failed", "http_fetch needs a request object with a string `url`")
    try:
        url = canonical_url(request["url"]).url
    except UrlRefused as exc:
        raise HostError("failed", f"http_fetch refused the URL: {exc}") from None
    if url == request["url"]:
        return request, text
    changed = {**request, "url": url}
    return changed, json.dumps(changed, ensure_ascii=False)


def host_allowed(url: CanonicalUrl, allow_hosts: list[str]) -> bool:
    """`allow_hosts` entries are `host:port`, or a bare host meaning the URL scheme's default
    port only (80 for http, 443 for https): a bare `127.0.0.1` must not open every service
    on that machine, the node's own API included."""
    host, port = url.host, url.port
    default = 443 if url.scheme == "https" else 80
    for entry in allow_hosts:
        entry = entry.lower().strip().rstrip(".")
        if entry in (f"{host}:{port}", f"[{host}]:{port}"):
            return True
        if entry in (host, f"[{host}]") and port == default:
            return True
    return False


def _headers(raw: dict[Any, Any]) -> dict[str, str]:
    """The agent's headers, without those the node sets itself: `Host` (from the URL, so
    it always names the allowed host) and the framing ones aiohttp computes."""
    return {str(k): str(v) for k, v in raw.items() if str(k).strip().lower() not in _NODE_HEADERS}


class Capabilities:
    def __init__(self, session: aiohttp.ClientSession, actions: dict[str, ActionSection]) -> None:
        self.session = session
        self.actions = actions

    async def http_fetch(
        self, request: Any, allow_hosts: list[str], key: str | None = None
    ) -> dict[str, Any]:
        if not isinstance(request, dict) or not isinstance(request.get("url"), str):
            raise HostError("failed", "http_fetch needs a request object with a string `url`")
        try:
            target = canonical_url(request["url"])
        except UrlRefused as exc:
            raise HostError("failed", f"http_fetch refused the URL: {exc}") from None
        url = target.url
        if not host_allowed(target, allow_hosts):
            raise HostError("not-permitted", f"host of {url} is not in this agent's allow_hosts")
        method = str(request.get("method", "GET")).upper()
        if method not in _METHODS:
            raise HostError("failed", f"unsupported method {method}")
        headers = request.get("headers") or {}
        body = request.get("body")
        if not isinstance(headers, dict) or not (body is None or isinstance(body, str)):
            raise HostError("failed", "`headers` must be an object and `body` a string")
        sent = _headers(headers)
        own_key = any(k.strip().lower() == "idempotency-key" for k in sent)
        if key is not None and method not in SAFE_METHODS and not own_key:
            sent[IDEMPOTENCY_HEADER] = header_value(key)
        try:
            async with self.session.request(
                method,
                target.yarl(),
                headers=sent,
                data=body.encode() if body is not None else None,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT),
            ) as response:
                raw = await response.content.read(MAX_BODY + 1)
                return {
                    "status": response.status,
                    "headers": {k.lower(): v for k, v in response.headers.items()},
                    "body": raw[:MAX_BODY].decode("utf-8", "replace"),
                    "truncated": len(raw) > MAX_BODY,
                }
        except (TimeoutError, aiohttp.ClientError, ValueError) as e:
            raise HostError("failed", f"fetch of {url} failed: {type(e).__name__}: {e}") from e

    async def action(
        self, agent: str, capability: str, request: Any, key: str | None = None
    ) -> dict[str, Any]:
        target = self.actions.get(capability)
        if target is None:
            return {"status": "recorded"}
        payload = {"agent": agent, "capability": capability, "request": request}
        try:
            async with self.session.post(
                target.url,
                json=payload,
                headers={IDEMPOTENCY_HEADER: header_value(key)} if key is not None else None,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=target.timeout_secs),
            ) as response:
                text = (await response.content.read(MAX_BODY)).decode("utf-8", "replace")
        except (TimeoutError, aiohttp.ClientError) as e:
            raise HostError(
                "failed", f"{capability} endpoint unreachable: {type(e).__name__}"
            ) from e
        if response.status >= 400:
            raise HostError(
                "failed", f"{capability} endpoint answered {response.status}: {text[:200]}"
            )
        try:
            body: Any = json.loads(text) if text else None
        except ValueError:
            body = text
        return {"status": response.status, "body": body}
