"""POSTing a notification: one HTTP client whose connections only reach allowed addresses.

Every attempt has a deadline (`[delivery] attempt_timeout_secs`), redirects are not followed
(a 3xx is a failure that says so), at most a few KiB of an answer are read, and what an attempt
reports never holds the URL, a header or the answer's body: only the status, or what failed.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp
from aiohttp.abc import AbstractResolver
from standardwebhooks.webhooks import Webhook

from node.delivery.addresses import AddressPolicy, DestinationRefused, GuardedResolver, check_url

MAX_ANSWER = 4096
MAX_RETRY_AFTER = 86_400.0


@dataclass(frozen=True)
class Outcome:
    """How one attempt went: `ok` (2xx), `gone` (410: stop for good), a status, when to try
    again if the receiver said (Retry-After), and a short reason for people."""

    ok: bool
    status: int = 0
    gone: bool = False
    retry_after: float | None = None
    error: str = ""
    refused: bool = False


class Poster:
    def __init__(
        self,
        policy: AddressPolicy,
        timeout: float,
        in_flight: int,
        per_host: int,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.policy = policy
        self.timeout = timeout
        self._limits = (in_flight, per_host)
        self._resolver = resolver  # what names resolve with before the check (aiohttp's)
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            in_flight, per_host = self._limits
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self.policy, self._resolver),
                use_dns_cache=False,  # every connection resolves, and is checked, anew
                limit=in_flight,
                limit_per_host=per_host,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                trust_env=False,  # no proxy from the environment: the check is on our own hop
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Outcome:
        try:
            target = check_url(url, self.policy)
            async with self.session().post(
                target.yarl(), data=body, headers=headers, allow_redirects=False
            ) as answer:
                await answer.content.read(MAX_ANSWER)
                status = answer.status
                retry_after = _retry_after(answer.headers.get("Retry-After"))
        except DestinationRefused as exc:
            return Outcome(False, error=f"refused: {exc}", refused=True)
        except aiohttp.ClientConnectorError as exc:
            refused = _refusal_in(exc)
            if refused is not None:
                return Outcome(False, error=f"refused: {refused}", refused=True)
            return Outcome(False, error=f"cannot connect ({type(exc.os_error).__name__})")
        except TimeoutError:
            return Outcome(False, error=f"no answer within {self.timeout:g} s")
        except aiohttp.ClientError as exc:
            return Outcome(False, error=f"the exchange failed ({type(exc).__name__})")
        if 200 <= status < 300:
            return Outcome(True, status)
        if 300 <= status < 400:
            return Outcome(False, status, error=f"HTTP {status}: redirects are not followed")
        return Outcome(
            False, status, gone=status == 410, retry_after=retry_after, error=f"HTTP {status}"
        )


def _refusal_in(exc: aiohttp.ClientConnectorError) -> DestinationRefused | None:
    """aiohttp wraps what the resolver raised; find our refusal in it."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, DestinationRefused):
            return seen
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "os_error", None)
    return None


def _retry_after(value: str | None) -> float | None:
    text = (value or "").strip()
    if not (text.isascii() and text.isdigit()):
        return None  # isdigit() alone takes "²", which float() refuses
    return min(float(text), MAX_RETRY_AFTER)


def standard_webhook_headers(secret: str, entry_id: str, body: bytes) -> dict[str, str]:
    """Standard Webhooks: a message id (the same on every retry, so receivers de-duplicate),
    the attempt's time and an HMAC-SHA256 signature of `id.timestamp.body` by the
    `standardwebhooks` package."""
    message_id = "msg_" + message_key(entry_id)
    now = datetime.now(UTC)
    signature = Webhook(secret).sign(message_id, now, body.decode())
    return {
        "Content-Type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }


def message_key(entry_id: str) -> str:
    """A stable, opaque key of one notification (its id names tasks and configs)."""
    digest = hashlib.sha256(entry_id.encode("utf-8", "surrogatepass")).digest()[:18]
    return base64.urlsafe_b64encode(digest).decode()
