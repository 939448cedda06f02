"""Reads the `payments` secret each tick; never logs it, only its length.

A revoked grant shows as `not-permitted` on the very next call.
"""

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

DOMAIN = "payments"
KEY = "api_key"


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        try:
            secret = host.get_secret(DOMAIN, KEY)
        except Err as e:
            host.state_set("secret_status", "denied")
            host.log("warn", f"no access to {DOMAIN}/{KEY}: {e.value.value}")
            return
        host.state_set("secret_status", f"ok:{len(secret)}")
        host.log("info", f"read {DOMAIN}/{KEY} ({len(secret)} chars)")

    def handle_task(self, task: types.Task) -> str:
        raise Err("secrets_reader does not take tasks")

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
