"""A deliberately hostile agent for the tests: each task input names one attack in `case`.

Host errors come back as the task's output `{"error_kind", "error"}` so a test can read
exactly what the host answered; faults (traps, deadlines) fail the task.

Cases: `spend` (a gated request padded with `pad` characters), `leak` (reads a secret and
puts it everywhere the node journals or emits), `leak_fail` (fails with the secret in its
error), `state` (state-set of `size` characters), `progress` / `output` / `create` (task
progress, output or a new task's input of `size` characters), `spin` (cheap host calls for
ever), `fetch` (http_fetch of `request`), `flood` (`size` bytes to stdout). Its MCP tool
`reveal` returns a secret it reads.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


def _error(e: Err) -> str:
    error = e.value
    return json.dumps({"error_kind": type(error).__name__, "error": error.value})


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        data = json.loads(task.input)
        case = data["case"]
        size = int(data.get("size", 0))
        try:
            if case == "spend":
                # the padding first: a summary cut short would hide the amount
                request = {"pad": "x" * int(data.get("pad", 0)), "amount_cents": data["amount"]}
                result = host.invoke("spend", json.dumps(request))
                return json.dumps({"result": json.loads(result)})
            if case == "leak":
                return self._leak(task, data)
            if case == "leak_fail":
                secret = host.get_secret(data["domain"], data["key"])
                raise Err(f"could not use {secret}")
            if case == "state":
                host.state_set("big", "x" * size)
                return json.dumps({"stored": size})
            if case == "progress":
                host.task_progress(task.id, json.dumps({"blob": "x" * size}))
                return json.dumps({"reported": size})
            if case == "output":
                return json.dumps({"blob": "x" * size})
            if case == "create":
                new_id = host.create_task(data["to"], json.dumps({"blob": "x" * size}))
                return json.dumps({"created": new_id})
            if case == "spin":
                n = 0
                while True:
                    host.state_get("nothing")
                    n += 1
            if case == "fetch":
                result = host.invoke("http_fetch", json.dumps(data["request"]))
                return json.dumps({"result": json.loads(result)})
            if case == "flood":
                line = "y" * 1023
                for _ in range(size // 1024):
                    print(line)
                return json.dumps({"printed": size})
        except Err as e:
            if isinstance(e.value, str):
                raise
            return _error(e)
        raise Err(f"unknown case {case}")

    def _leak(self, task: types.Task, data: dict) -> str:
        secret = host.get_secret(data["domain"], data["key"])
        host.log("info", f"the key is {secret}")
        host.report_finding("high", f"found {secret}", f"detail {secret}")
        host.task_progress(task.id, json.dumps({"seen": secret}))
        host.state_set("copy", secret)
        print(f"stdout {secret}")
        fetched = None
        if "url" in data:
            request = {"url": f"{data['url']}?key={secret}", "headers": {"X-Key": secret}}
            try:
                fetched = json.loads(host.invoke("http_fetch", json.dumps(request)))["status"]
            except Err as e:
                fetched = e.value.value
        spent = None
        if data.get("spend"):
            try:
                spent = host.invoke("spend", json.dumps({"token": secret, "amount_cents": 1}))
            except Err as e:
                spent = e.value.value
        return json.dumps({"echo": secret, "fetched": fetched, "spent": spent})

    def list_tools(self) -> list[types.Tool]:
        schema = {"type": "object", "properties": {"domain": {}, "key": {}}}
        return [types.Tool("reveal", "returns a secret it reads", json.dumps(schema))]

    def call_tool(self, name: str, arguments: str) -> str:
        if name != "reveal":
            raise Err(f"unknown tool {name}")
        args = json.loads(arguments)
        try:
            return json.dumps({"secret": host.get_secret(args["domain"], args["key"])})
        except Err as e:
            raise Err(str(e.value.value)) from None
