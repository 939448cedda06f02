"""Which addresses a notification may be sent to: public ones, and what the operator allowed.

A client names its webhook, so without this a client could make the node a proxy into the
node's own network (its loopback services, the cloud's metadata address, the LAN). Every
address a name resolves to is checked, by the resolver the HTTP client connects with
(`GuardedResolver`): the addresses checked are the ones connected to, so a name that resolves
to a public address when it is checked and to 127.0.0.1 when it is used (DNS rebinding) cannot
get through. An address literal in the URL is checked before the request (`check_url`), since
aiohttp does not resolve those: the host checked is the one the client connects to, read from
the URL's canonical form (node/web/urls.py), in which Unicode spellings of an IP literal's
digits and dots are ASCII already, and that form is what is sent. Redirects are never
followed (webhooks.py).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from node.web.urls import CanonicalUrl, UrlRefused, canonical_url

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_URL = 2048
# IPv6 prefixes that carry an IPv4 address: judged as the IPv4 address inside
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class DestinationRefused(Exception):
    """A destination this node may not send to; the message says why, for the client."""


class AddressPolicy:
    """Public unicast addresses, plus the networks `[delivery] allow_networks` names."""

    def __init__(self, allow_networks: Iterable[str] = ()) -> None:
        self.allowed: tuple[Network, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allow_networks
        )

    def refusal(self, address: Address) -> str | None:
        """Why `address` is refused (a short phrase), or None when it may be used."""
        inner = _embedded_ipv4(address)
        for candidate in (address, inner) if inner is not None else (address,):
            if any(candidate in network for network in self.allowed):
                return None
        judged = inner if inner is not None else address
        why = _special(judged)
        return f"{judged} is {why}" if why else None

    def check(self, addresses: Iterable[str]) -> None:
        for text in addresses:
            try:
                address = ipaddress.ip_address(text.split("%", 1)[0])
            except ValueError:
                raise DestinationRefused(f"{text!r} is not an IP address") from None
            why = self.refusal(address)
            if why:
                raise DestinationRefused(
                    f"{why}; notifications go to public addresses unless "
                    "[delivery] allow_networks names the range"
                )


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def _special(address: Address) -> str | None:
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a reserved or special-purpose address"
    return None


def check_url(url: str, policy: AddressPolicy) -> CanonicalUrl:
    """The URL in the form the client sends, when it is one notifications may use: http or
    https, a host, no credentials in it, and an address literal only if the policy allows it.
    Raises DestinationRefused saying why (never echoing the URL, which may hold a token)."""
    if len(url) > MAX_URL:
        raise DestinationRefused(f"the URL is longer than {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError:
        raise DestinationRefused("the URL does not parse") from None
    if parts.scheme not in ("http", "https"):
        raise DestinationRefused("the URL must start with http:// or https://")
    host = parts.hostname
    if not host:
        raise DestinationRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise DestinationRefused("the URL carries credentials: use the authentication field")
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
        raise DestinationRefused("the URL holds spaces or control characters")
    try:
        target = canonical_url(url)
    except UrlRefused as exc:
        raise DestinationRefused(str(exc)) from None
    try:  # the host aiohttp connects to without asking the resolver when it is a literal
        literal = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    if literal is not None:
        policy.check([str(literal)])
    return target


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, refusing a name when any address it resolves to is refused: aiohttp
    connects only to the addresses a resolver returns, so what is checked is what is used."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        self.policy.check(r["host"] for r in results)
        return results

    async def close(self) -> None:
        await self.inner.close()
