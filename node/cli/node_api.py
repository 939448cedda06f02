"""A running node's API as the command line calls it, shared by every client command
(client.py, agents.py, authoring/): `Node` (one node, one token), `ClientError` (what
went wrong, as the node said it), and the printing of answers (`table`, `emit`).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from node.display.humanize import visible, visible_lines

if TYPE_CHECKING:
    import httpx

URL_ENV = "AGENT_NODE_URL"
TOKEN_ENV = "AGENT_NODE_TOKEN"
CA_FILE_ENV = "AGENT_NODE_CA_FILE"  # PEM CA(s) to verify an https node with
DEFAULT_URL = "http://127.0.0.1:8080"


class ClientError(Exception):
    """A call that failed; `detail` is what the node (or the network) said was wrong."""

    def __init__(
        self, detail: str, exit_code: int = 1, problem: dict[str, Any] | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.exit_code = exit_code
        self.problem = problem  # the node's problem+json body, when it sent one


class Node:
    """The API of one node with one token."""

    def __init__(
        self, url: str, token: str, timeout: float = 30, ca_file: str | None = None
    ) -> None:
        import httpx  # here, not at the top: `agent-node run` should not pay for importing it

        from node.web.tlsclient import client_context

        self.url = url.rstrip("/")
        ca_file = ca_file or os.environ.get(CA_FILE_ENV) or None  # else the system's trust
        self.ca_file = ca_file
        try:
            verify = client_context(ca_file)
        except OSError as exc:  # ssl.SSLError too: not PEM
            raise ClientError(f"cannot load the CA file {ca_file}: {exc}", 2) from None
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            verify=verify,
        )

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach the node at {self.url}: {exc}") from None
        if response.status_code >= 400:
            problem = problem_of(response)
            raise ClientError(problem_detail(response, problem), problem=problem)
        if not response.content:
            return None
        return response.json()

    def another(self, timeout: float = 10) -> Node:
        """A second connection with the same token: to read while a call of this one waits."""
        token = self._http.headers["Authorization"].removeprefix("Bearer ")
        return Node(self.url, token, timeout, self.ca_file)

    def close(self) -> None:
        self._http.close()


def problem_of(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's JSON object (a problem's `detail` and any member it adds), or None."""
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def problem_detail(response: httpx.Response, body: dict[str, Any] | None) -> str:
    if body is not None and isinstance(body.get("detail"), str):
        return f"{body['detail']} (HTTP {response.status_code})"
    return f"HTTP {response.status_code} {response.reason_phrase}: {response.text[:200]}"


def table(rows: Iterable[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Columns are (heading, key); values are shown as text, dicts and lists as JSON."""
    cells = [[heading.upper() for heading, _ in columns]]
    for row in rows:
        cells.append([cell(row.get(key)) for _, key in columns])
    if len(cells) == 1:
        return "(none)"
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(value.ljust(width) for value, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def cell(value: Any) -> str:
    """One line showing what is there (invisible characters escaped)."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return visible(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    return visible(str(value))


def emit(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    """`--json` exact (JSON escapes what is not ASCII); the human text with nothing invisible
    left but its own line breaks (each value in it went through `visible` or `cell`)."""
    print(json.dumps(data, indent=2) if args.json else visible_lines(human(data)), flush=True)


def segment(value: str) -> str:
    """One path segment, whatever the id holds."""
    return quote(value, safe="")
