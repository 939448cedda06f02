"""Time from an approval request to its appearance in the operator console, in a real browser.

A node process hosts the gated example payer (ticking every 20 ms, so it asks for its next
payment as soon as the last one is decided); Debian's chromium, driven by Playwright, has the
console signed in on its inbox. A MutationObserver in the page records, for each request row
the console inserts, `Date.now()` minus the request's `requested_at` (the journal timestamp,
stamped as the writer builds the transaction, so commit and fsync are included). The bench
approves each request over the API once it is on screen, N times (100).

Peer in the same run: a raw Python SSE client on the same /api/v1/events stream records the
same interval at the wire, so the difference is the console's own cost (fetch stream reader,
SSE parsing, rendering). Same host, same clock. Run:
  .venv/bin/python bench/console.py [--requests 100]
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile  # noqa: E402
from harness.node import ADMIN_TOKEN, NodeProcess, auth, write_config  # noqa: E402
from node.ops.polling import wait_until  # noqa: E402

OBSERVER = """
window.latencies = [];
new MutationObserver((mutations) => {
  const now = Date.now();
  for (const m of mutations) for (const node of m.addedNodes) {
    if (!(node instanceof Element)) continue;
    for (const row of node.matches("li.request") ? [node] : node.querySelectorAll("li.request")) {
      if (window.seen.has(row.dataset.id)) continue;
      window.seen.add(row.dataset.id);
      window.latencies.push([row.dataset.id, now - Date.parse(row.dataset.requestedAt)]);
    }
  }
}).observe(document.querySelector("main"), { childList: true, subtree: true });
"""


def built_payer() -> Path:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-agents"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(run.stdout)["payer"])


def stamp(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def wire_listener(url: str, out: dict[str, float], stop: threading.Event) -> None:
    """The peer: when each approval_requested frame reaches a plain client, minus its `ts`."""
    headers = auth(ADMIN_TOKEN)
    try:
        with httpx.stream("GET", url + "/api/v1/events", headers=headers, timeout=None) as stream:
            event = None
            for line in stream.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "approval_requested":
                    data = json.loads(line[6:])
                    out[data["id"]] = (time.time() - stamp(data["ts"])) * 1000
    except httpx.HTTPError:
        return  # the node stopped at the end of the run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    payer = built_payer()
    os.environ.setdefault("AGENT_NODE_COMPILED_CACHE", str(ROOT / ".cache" / "wasmtime"))
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(
            Path(tmp),
            f"""
[[agents]]
name = "payer"
component = "{payer}"
tick_interval_ms = 20
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 600
""",
        )
        wire: dict[str, float] = {}
        stop = threading.Event()
        with NodeProcess(config) as node, sync_playwright() as playwright, node.client() as http:
            listener = threading.Thread(
                target=wire_listener, args=(node.url, wire, stop), daemon=True
            )
            listener.start()
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(node.url + "/console/")
            page.get_by_label("Bearer token").fill(ADMIN_TOKEN)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_selector("#stream-state:text('live')")
            # rows already on screen were loaded, not streamed: they do not count
            page.evaluate(
                "window.seen = new Set([...document.querySelectorAll('li.request')]"
                ".map((r) => r.dataset.id))"
            )
            page.evaluate(OBSERVER)
            for row in page.query_selector_all("li.request"):
                http.post(
                    f"/api/v1/approvals/{row.get_attribute('data-id')}",
                    json={"decision": "approve"},
                ).raise_for_status()
            started = time.monotonic()

            def all_seen() -> list | None:
                """Approve what the page has shown; done once it showed every request."""
                seen = page.evaluate("window.latencies")
                if len(seen) >= args.requests:
                    return seen
                decided = {i for i, _ in seen}
                for approval in http.get("/api/v1/approvals").json():
                    if approval["id"] in decided:
                        http.post(
                            f"/api/v1/approvals/{approval['id']}", json={"decision": "approve"}
                        ).raise_for_status()
                return None

            seen = wait_until(all_seen, 300, f"{args.requests} requests appear", 0.005)
            elapsed = time.monotonic() - started
            stop.set()
            browser.close()
    browser_ms = [ms for _, ms in seen[: args.requests]]
    wire_ms = [wire[i] for i, _ in seen[: args.requests] if i in wire]
    figures = {
        "requests": len(browser_ms),
        "console_p50_ms": round(percentile(browser_ms, 0.5), 1),
        "console_p99_ms": round(percentile(browser_ms, 0.99), 1),
        "console_max_ms": round(max(browser_ms), 1),
        "wire_p50_ms": round(percentile(wire_ms, 0.5), 1),
        "wire_p99_ms": round(percentile(wire_ms, 0.99), 1),
        "wire_samples": len(wire_ms),
        "elapsed_s": round(elapsed, 1),
    }
    print(f"approval request -> console row, {len(browser_ms)} requests")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
