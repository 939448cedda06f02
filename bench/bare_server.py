"""The peer of the findings benchmark, as `../shared/tools/perf-guard` has it: aiohttp parsing
the same JSON, checking it is an object with a title, and answering 201 with it."""

import sys

from aiohttp import web


async def bare(request: web.Request) -> web.Response:
    body = await request.json()
    if not isinstance(body, dict) or "title" not in body:
        return web.json_response({"error": "title required"}, status=422)
    return web.json_response({"id": 1, **body}, status=201)


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


app = web.Application()
app.router.add_post("/api/v1/findings", bare)
app.router.add_get("/api/v1/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
