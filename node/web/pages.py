"""Lists answered a page at a time, the page bounded in bytes (`[node] page_max_kb`), whatever
the door: REST arrays, A2A JSON-RPC's ListTasks, MCP's tools/list.

A list bounded only in count is as large as its items: 100 ListTasks pages of 60 KB tasks,
never read, pinned 1.4 GB (issue 45). Each item is encoded once, and the page stops once the
next item would take it past the budget (it holds at least one item, so a client always
progresses); what follows starts at the returned offset. The items' own large values are left
out by the list (`elide` callbacks), for the single read to serve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from node.context import CONTEXT
from node.web.http import NonNegative, int_query
from node.web.routes import Query

T = TypeVar("T")
NEXT_CURSOR = "X-Next-Cursor"
CURSOR = Query(
    "cursor", NonNegative, f"where the page starts: the `{NEXT_CURSOR}` of the previous one"
)
# what a paged list's documentation says
PAGED = (
    "A page ends at about `node.page_max_kb` of JSON (at least one item); when more follow, "
    f"the `{NEXT_CURSOR}` header (and a `Link` rel=next) gives the `cursor` of the next page."
)
_encode = msgspec.json.Encoder().encode


def byte_page(
    items: Iterable[T], max_bytes: int, encode: Callable[[T], bytes] = _encode
) -> tuple[list[bytes], bool]:
    """The encodings of `items` from the first, until one more would pass `max_bytes` (at
    least one); whether any item was left for the next page."""
    page: list[bytes] = []
    size = 0
    iterator: Iterator[T] = iter(items)
    for item in iterator:
        encoded = encode(item)
        if page and size + len(encoded) > max_bytes:
            return page, True
        page.append(encoded)
        size += len(encoded) + 1
    return page, False


def json_array(encoded: list[bytes]) -> bytes:
    return b"[" + b",".join(encoded) + b"]"


def page_response(request: web.Request, items: list[Any]) -> web.Response:
    """A REST list as a JSON array, from the request's `cursor` (an offset), bounded in bytes:
    when more follow, `X-Next-Cursor` (and a `Link` rel=next) says where the next page starts."""
    start = int_query(request, "cursor", 0)
    page, more = byte_page(items[start:], request.app[CONTEXT].config.node.page_max_kb * 1024)
    response = web.Response(body=json_array(page), content_type="application/json")
    if more:
        next_cursor(request, response, start + len(page))
    return response


def next_cursor(request: web.Request, response: web.Response, cursor: int) -> None:
    response.headers[NEXT_CURSOR] = str(cursor)
    following = request.rel_url.update_query(cursor=cursor)
    response.headers["Link"] = f'<{following}>; rel="next"'
