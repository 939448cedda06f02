"""The operator console at /console/: static files from the package, and the API's few
read endpoints it needs (node/console/endpoints.py).

The files are public (they hold no data); every data call the page makes goes to /api/v1 with
the operator's bearer token, so the console can do nothing an API client could not, and all it
does is journaled the same way.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

import node.console
from node.console import endpoints
from node.web.frontdoor import add_path_headers
from node.web.routes import PUBLIC, Doc, add_route

STATIC_DIR = Path(node.console.__file__).parent / "static"
CONSOLE_PATH = "/console/"
# The page loads only its own files and talks only to this node: nothing leaves it.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


def setup(app: web.Application) -> None:
    endpoints.setup(app)
    add_route(
        app,
        "GET",
        CONSOLE_PATH,
        index,
        PUBLIC,
        Doc(
            "The operator console (HTML; its data calls need a token)",
            "console",
            content={"text/html": {"type": "string"}},
        ),
    )
    app.router.add_static(CONSOLE_PATH, STATIC_DIR, name="console", append_version=False)
    add_path_headers(app, CONSOLE_PATH, SECURITY_HEADERS)
