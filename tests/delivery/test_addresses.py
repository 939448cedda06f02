"""Where notifications may go (node/delivery/addresses.py): public addresses and the operator's
allowed networks; every address a name resolves to is checked where the connection is made,
so DNS rebinding gets nowhere; redirects are not followed."""

from __future__ import annotations

import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from node.delivery.addresses import AddressPolicy, DestinationRefused, GuardedResolver
from node.delivery.webhooks import Poster
from tests.delivery.support import start_receiver

REFUSED = {
    "127.0.0.1": "loopback",
    "::1": "loopback",
    "::ffff:127.0.0.1": "loopback",  # IPv4-mapped
    "64:ff9b::7f00:1": "loopback",  # NAT64 of 127.0.0.1
    "2002:7f00:1::": "loopback",  # 6to4 of 127.0.0.1
    "10.0.0.7": "private",
    "192.168.1.1": "private",
    "172.16.0.1": "private",
    "fd00::1": "private",
    "169.254.169.254": "link-local",
    "fe80::1": "link-local",
    "100.64.0.1": "reserved or special-purpose",  # carrier-grade NAT
    "224.0.0.1": "multicast",
    "0.0.0.0": "unspecified",
    "240.0.0.1": "reserved",
}


def test_special_ranges_are_refused_and_public_or_allowed_ones_pass():
    policy = AddressPolicy()
    for address, why in REFUSED.items():
        with pytest.raises(DestinationRefused, match=why):
            policy.check([address])
    policy.check(["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"])
    with pytest.raises(DestinationRefused):  # one bad address among good ones is enough
        policy.check(["93.184.216.34", "10.0.0.7"])
    allowing = AddressPolicy(["10.0.0.0/8", "127.0.0.1/32"])
    allowing.check(["10.1.2.3", "127.0.0.1", "::ffff:127.0.0.1"])
    with pytest.raises(DestinationRefused):
        allowing.check(["127.0.0.2"])


class Rebinding(AbstractResolver):
    """A name that resolves to a public address at first, then to loopback."""

    def __init__(self) -> None:
        self.calls = 0

    async def resolve(self, host, port=0, family=socket.AF_INET):
        self.calls += 1
        address = "93.184.216.34" if self.calls == 1 else "127.0.0.1"
        return [
            ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=0)
        ]

    async def close(self) -> None:
        pass


async def test_a_name_is_checked_where_it_is_connected_so_rebinding_gets_nowhere(aiohttp_server):
    receiver = await start_receiver(aiohttp_server)
    port = int(receiver.url.rsplit(":", 1)[1])
    rebinding = Rebinding()
    guarded = GuardedResolver(AddressPolicy(), rebinding)
    assert (await guarded.resolve("rebind.example", port))[0]["host"] == "93.184.216.34"
    poster = Poster(AddressPolicy(), 5, 4, 2, resolver=rebinding)
    try:
        outcome = await poster.post(f"http://rebind.example:{port}/x", b"{}", {})
        assert not outcome.ok and outcome.refused
        assert "127.0.0.1 is a loopback address" in outcome.error
        assert "rebind.example" not in outcome.error  # the URL never shows
        assert not receiver.received and receiver.refused == 0
        with pytest.raises(DestinationRefused):
            await GuardedResolver(AddressPolicy()).resolve("localhost", port)
        literal = await poster.post(f"http://127.0.0.1:{port}/x", b"{}", {})
        assert literal.refused and not receiver.received
    finally:
        await poster.close()


async def test_redirects_are_not_followed(aiohttp_server):
    receiver = await start_receiver(aiohttp_server)
    receiver.answer = lambda _: 307
    poster = Poster(AddressPolicy(["127.0.0.0/8"]), 5, 4, 2)
    try:
        outcome = await poster.post(f"{receiver.url}/x", b"{}", {})
    finally:
        await poster.close()
    assert not outcome.ok and outcome.status == 307
    assert "redirects are not followed" in outcome.error
    assert receiver.refused == 1  # the Location (another port) was never asked
