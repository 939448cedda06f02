"""Bearer tokens with scopes: hashes only in memory, constant-time comparison, 401 vs 403."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from aiohttp import web

from node.config.model import AuthSection
from node.web.http import problem_response
from node.web.routes import PUBLIC, Scopes, scopes_of


@dataclass(frozen=True, slots=True)
class Identity:
    """Who called: the token's name (recorded as the operator) and what it may do."""

    name: str
    scopes: frozenset[str]
    groups: frozenset[str] = frozenset()  # approver groups (docs/approvals.md)

    def allows(self, needed: Scopes) -> bool:
        return "admin" in self.scopes or any(scope in self.scopes for scope in needed)


IDENTITY: web.RequestKey[Identity] = web.RequestKey("identity", Identity)
# the sha256 of the token the request showed: what open streams are held under, so a reload
# that drops or changes the token ends them (node/streams/slots.py)
TOKEN_DIGEST: web.RequestKey[bytes] = web.RequestKey("token_digest", bytes)


def identity_of(request: web.Request) -> Identity | None:
    return request.get(IDENTITY)


class TokenTable:
    def __init__(self, auth: AuthSection) -> None:
        self.reload(auth)

    def reload(self, auth: AuthSection) -> None:
        """Swap in a new set of tokens (SIGHUP) in one assignment: a request sees old or new."""
        self._entries = [
            (
                bytes.fromhex(t.token_sha256) if t.token_sha256 else token_digest(t.token or ""),
                Identity(t.name, frozenset(t.scopes), frozenset(t.groups)),
            )
            for t in auth.tokens
        ]

    def identify(self, token: str) -> Identity | None:
        return self.identify_digest(token_digest(token))

    def identify_digest(self, digest: bytes) -> Identity | None:
        """Compare against every entry so timing tells nothing about which one matched."""
        found = None
        for stored, identity in self._entries:
            if hmac.compare_digest(stored, digest):
                found = identity
        return found


TOKENS = web.AppKey("tokens", TokenTable)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def new_token() -> str:
    return "an_" + secrets.token_urlsafe(32)


def _unauthorized(detail: str) -> web.Response:
    return problem_response(401, detail, headers={"WWW-Authenticate": 'Bearer realm="agent-node"'})


def refusal(request: web.Request) -> web.Response | None:
    """The 401 or 403 answer when the route's scopes are not met; None lets the request in
    (with its `IDENTITY` set when it showed a token). Public routes and unknown paths outside
    the API need no token."""
    route = request.match_info.route
    needed = scopes_of(request.app, route)
    if needed is None:
        if not request.path.startswith("/api/"):
            return None  # unknown paths outside the API: a plain 404
        needed = ("admin",) if request.match_info.http_exception is None else ("read",)
    if needed == PUBLIC:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return _unauthorized("send Authorization: Bearer <token>")
    digest = token_digest(token.strip())
    identity = request.app[TOKENS].identify_digest(digest)
    if identity is None:
        return _unauthorized("the bearer token is not valid")
    if not identity.allows(needed):
        return problem_response(
            403,
            f"token {identity.name!r} lacks the scope for this call (one of: {', '.join(needed)})",
        )
    request[IDENTITY] = identity
    request[TOKEN_DIGEST] = digest
    return None
