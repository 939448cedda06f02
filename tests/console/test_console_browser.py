"""The operator console in a real browser (Debian's chromium, driven by Playwright) against a
real node process hosting a gated payer: sign-in, live approvals, decisions, batch denial,
grants, read-only tokens, errors, and the stream coming back after the node restarts.

A failing test saves a screenshot of every open page in test-artifacts/console/."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.console_support import (
    FINANCE_TOKEN,
    ONCALL_TOKEN,
    TWO_WITH_FINANCE,
    console_config,
    seed_denied,
    seed_pending,
    seed_usage,
)
from tests.polling import wait_until
from tests.support import ADMIN_TOKEN, READ_TOKEN, ROOT, NodeProcess, logs_on_failure

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "console"
TIMEOUT_MS = 15_000
PAGES: list[Page] = []
EXPORT_REQUEST = "export every ledger of 2026 to s3://reports/ledgers"
PHONE = (390, 844)
# clears the screen, returns to the row's start, a C1 CSI, reversed text, a zero-width space
HOSTILE = "\x1b[2J\rAPPROVED \x9b2J \u202eevorppa\u200b!"
HOSTILE_SHOWN = "\\x1b[2J\\rAPPROVED \\x9b2J \\u202eevorppa\\u200b!"
INVISIBLE = ("\x1b", "\r", "\x9b", "\u202e", "\u200b")


@pytest.fixture(scope="module")
def node(tmp_path_factory, built_agents) -> Iterator[NodeProcess]:
    from node.runtime.compiled_cache import COMPILED_CACHE_ENV
    from tests.runtime_support import COMPILED_CACHE

    os.environ[COMPILED_CACHE_ENV] = str(COMPILED_CACHE)
    directory = tmp_path_factory.mktemp("console-node")
    config = console_config(directory, built_agents)
    seed_pending(config, "ledger", "refund", ["refund-1", "refund-2", "refund-3"])
    # a request that is not JSON: the console shows it as the text it is
    seed_pending(config, "ledger", "export", ["export-1"], request=EXPORT_REQUEST)
    # what a hostile peer's journal can hold: a request and a reason written to deceive
    hostile_request = json.dumps({"amount": 90000, "memo": HOSTILE})
    seed_pending(config, "ledger", "spend", ["hostile-1"], detail=HOSTILE, request=hostile_request)
    seed_usage(config, "ledger", USAGE)
    seed_denied(config, "ledger", "refund", "reversed-1", "\u202eevorppa")
    # a request a policy asked two people for, one of them from finance
    seed_pending(config, "ledger", "payout", ["payout-1"], approvers=TWO_WITH_FINANCE)
    node = NodeProcess(config)
    with logs_on_failure(node.log_path), node:
        yield node


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no chromium at {CHROMIUM}: scripts/setup --test installs it (apt install chromium)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def open_page(browser) -> Iterator[Callable[..., Page]]:
    """Pages in fresh contexts (each its own sessionStorage), closed after the test."""
    contexts = []

    def open_(width: int = 1280, height: int = 800) -> Page:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        PAGES.append(page)
        return page

    yield open_
    PAGES.clear()
    for context in contexts:
        context.close()


def screenshot_on_failure(test):
    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except BaseException:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            for index, page in enumerate(PAGES):
                try:
                    page.screenshot(path=str(ARTIFACTS / f"{test.__name__}-{index}.png"))
                except Exception as exc:  # a closed page: report the test's own failure
                    print(f"no screenshot of page {index}: {exc}")
            raise

    return wrapper


def sign_in(page: Page, node: NodeProcess, token: str, view: str = "inbox") -> None:
    page.goto(f"{node.url}/console/#/{view}")
    page.get_by_label("Bearer token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#stream-state")).to_have_text("live")


def payer_row(page: Page):
    return page.locator('section.group[data-agent="payer"] li.request')


@screenshot_on_failure
def test_a_wrong_token_shows_the_problem_detail(node, open_page):
    page = open_page()
    page.goto(f"{node.url}/console/")
    page.get_by_label("Bearer token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#signin-error")).to_contain_text("the bearer token is not valid")
    expect(page.locator("#app")).to_be_hidden()


@screenshot_on_failure
def test_a_notification_link_opens_the_inbox_on_its_request(node, open_page):
    """The console link of an approval notice (docs/notifications.md): #/inbox/<id>, which
    still asks for a token, then shows that request, focused."""
    page = open_page()
    page.goto(f"{node.url}/console/#/inbox/hostile-1")
    expect(page.get_by_label("Bearer token")).to_be_visible()  # the link alone decides nothing
    page.get_by_label("Bearer token").fill(ONCALL_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator('li.request[data-id="hostile-1"]')).to_be_focused()


@screenshot_on_failure
def test_approve_live_and_see_the_next_log_line_and_request(node, open_page):
    page, tail = open_page(), open_page()
    sign_in(page, node, ONCALL_TOKEN)
    sign_in(tail, node, ONCALL_TOKEN, view="logs")
    page.evaluate("window.notReloaded = true")
    first = payer_row(page).first
    expect(first).to_contain_text("INV-")
    first_id = first.get_attribute("data-id")
    invoice = re.search(r"INV-\d+", first.inner_text()).group(0)
    expect(first).to_contain_text(re.compile(r"\d+:\d\d"))  # the countdown to its timeout

    page.get_by_role("button", name=f"approve {first_id}").click()
    # the agent's next log line arrives in the other tab's live tail: the decision's durable
    # write, the parked run's resume, the spend, the log line and the stream, on a loaded
    # machine more than Playwright's default 5 s (a run beside other work took longer once)
    expect(tail.locator("#log-lines")).to_contain_text(f"paid {invoice}", timeout=20_000)
    tail.get_by_label("Level at least").select_option("error")  # the tail's filters
    expect(tail.locator("#log-lines")).not_to_contain_text(f"paid {invoice}")
    tail.get_by_label("Level at least").select_option("info")
    tail.get_by_label("Agent").select_option("vault")
    expect(tail.locator("#log-lines")).not_to_contain_text(f"paid {invoice}")
    expect(tail.locator("#log-lines")).to_contain_text("vault")
    # and its next request appears in the inbox, without a reload
    expect(payer_row(page).first).not_to_have_attribute("data-id", first_id)
    expect(payer_row(page).first).to_contain_text("INV-")
    assert page.evaluate("window.notReloaded") is True
    history = page.locator("table tr", has_text=first_id)
    expect(history).to_contain_text("approve")
    expect(history).to_contain_text("oncall")
    with node.client() as http:
        decided = http.get("/api/v1/approvals/history").json()
    assert {"id": first_id, "outcome": "approve", "operator": "oncall"}.items() <= next(
        r for r in decided if r["id"] == first_id
    ).items()


@screenshot_on_failure
def test_batch_deny_a_group(node, open_page):
    page = open_page()
    sign_in(page, node, ONCALL_TOKEN)
    group = page.locator('section.group[data-agent="ledger"][data-capability="refund"]')
    expect(group.locator("li.request")).to_have_count(3)
    group.get_by_role("button", name="deny all of ledger · refund").click()
    expect(group).to_have_count(0)
    expect(page.locator(".notice")).to_have_text("Denied 3")
    for approval_id in ("refund-1", "refund-2", "refund-3"):
        expect(page.locator("table tr", has_text=approval_id)).to_contain_text("deny")
    with node.client() as http:
        pending = {p["id"] for p in http.get("/api/v1/approvals").json()}
        history = {r["id"]: r for r in http.get("/api/v1/approvals/history").json()}
    assert not pending & {"refund-1", "refund-2", "refund-3"}
    assert history["refund-2"]["outcome"] == "deny" and history["refund-2"]["operator"] == "oncall"


@screenshot_on_failure
def test_two_approvers_one_from_finance(node, open_page):
    """The inbox says how far a request that needs two people is, live on every page; the
    same token approving twice counts once; the second approver decides."""
    oncall, finance = open_page(), open_page()
    sign_in(oncall, node, ONCALL_TOKEN)
    sign_in(finance, node, FINANCE_TOKEN)
    mine = oncall.locator('li.request[data-id="payout-1"]')
    theirs = finance.locator('li.request[data-id="payout-1"]')
    expect(mine.locator(".approvals")).to_have_text("0 of 2, waiting for finance, 1 more approver")
    mine.get_by_role("button", name="approve payout-1").click()
    expect(oncall.locator(".notice")).to_have_text(
        "Approval of payout-1 counted: 1 of 2, waiting for finance"
    )
    expect(mine.locator(".approvals")).to_have_text("1 of 2, waiting for finance")
    # the other page learns it from the stream
    expect(theirs.locator(".approvals")).to_have_text("1 of 2, waiting for finance")
    mine.get_by_role("button", name="approve payout-1").click()
    expect(oncall.locator("#error")).to_contain_text("a token counts once")
    expect(mine).to_have_count(1)
    theirs.get_by_role("button", name="approve payout-1").click()
    expect(theirs).to_have_count(0)
    expect(mine).to_have_count(0)  # decided: gone from every inbox
    for page in (oncall, finance):
        expect(page.locator("table tr", has_text="payout-1")).to_contain_text("oncall, finance")
    with node.client() as http:
        history = {r["id"]: r for r in http.get("/api/v1/approvals/history").json()}
    assert history["payout-1"]["approvers"] == ["oncall", "finance"]


def no_page_overflow(page: Page) -> None:
    """Nothing wider than the viewport: only tables scroll, inside their own box."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page is {width}px wide"


@screenshot_on_failure
def test_the_full_request_and_a_denial_reason_at_phone_width(node, open_page):
    page = open_page(*PHONE)
    sign_in(page, node, ONCALL_TOKEN)
    # a JSON request reads as its fields, not as an escaped string
    payer = payer_row(page).first
    payer.get_by_text("Full request").click()
    fields = payer.locator("dl.request-fields")
    expect(fields.locator("dt", has_text="invoice")).to_be_visible()
    expect(fields.locator("dd").first).to_have_text(re.compile(r"^INV-\d+$"))
    expect(fields.locator("dt", has_text="payee")).to_be_visible()
    expect(payer.locator("details")).not_to_contain_text('\\"')
    # a request that is not JSON shows as its text
    export = page.locator('li.request[data-id="export-1"]')
    # its node is gone and nothing here can ask for it again: the inbox says so
    expect(export.locator(".orphaned")).to_contain_text("nothing can ask for this again")
    export.get_by_text("Full request").click()
    expect(export.locator("pre.request-text")).to_have_text(EXPORT_REQUEST)
    no_page_overflow(page)

    export.get_by_label("reason for denying export-1").fill("exports need the CFO's sign-off")
    export.get_by_role("button", name="deny export-1").click()
    expect(export).to_have_count(0)
    row = page.locator("table tr", has_text="export-1")
    # what was asked (its summary), the outcome, by whom, why
    for shown in ("export request export-1", "deny", "oncall", "exports need the CFO's sign-off"):
        expect(row).to_contain_text(shown)
    with node.client() as http:
        history = {r["id"]: r for r in http.get("/api/v1/approvals/history").json()}
    assert history["export-1"]["reason"] == "exports need the CFO's sign-off"
    assert history["export-1"]["capability"] == "export"


def shown_text(page: Page, selector: str) -> str:
    """The text the page holds for the first match (what is laid out, not a reading of it)."""
    return page.locator(selector).first.evaluate("el => el.textContent")


@screenshot_on_failure
def test_bidi_and_control_characters_show_as_escapes(node, open_page):
    with node.client() as http:
        http.post(
            "/api/v1/findings",
            json={"agent": "worker", "severity": "high", "title": HOSTILE, "detail": HOSTILE},
        ).raise_for_status()
    page = open_page()
    sign_in(page, node, ONCALL_TOKEN)
    # a deny reason of "\u202eevorppa" would lay out as "approve": it shows what it is
    reason = page.locator('tr[data-id="reversed-1"] td.reason')
    expect(reason).to_have_text("\\u202eevorppa")
    assert shown_text(page, 'tr[data-id="reversed-1"] td.reason') == "\\u202eevorppa"
    # a request's summary, its fields and its label for screen readers
    request = page.locator('li.request[data-id="hostile-1"]')
    expect(request).to_contain_text(HOSTILE_SHOWN)
    request.get_by_text("Full request").click()
    expect(request.locator("dl.request-fields dd", has_text="APPROVED")).to_have_text(HOSTILE_SHOWN)
    whole = request.evaluate(
        "el => el.textContent + [...el.querySelectorAll('[aria-label],[title]')]"
        ".map(e => (e.getAttribute('aria-label') || '') + (e.getAttribute('title') || ''))"
        ".join('')"
    )
    assert "\\u202eevorppa" in whole and not any(char in whole for char in INVISIBLE)
    # a finding's title and detail, in the live tail and on its agent's page
    page.goto(f"{node.url}/console/#/logs")
    finding = page.locator("#finding-lines li", has_text="APPROVED").first
    expect(finding).to_contain_text(f"{HOSTILE_SHOWN} — {HOSTILE_SHOWN}")
    assert not any(char in finding.evaluate("el => el.textContent") for char in INVISIBLE)
    page.goto(f"{node.url}/console/#/agents")
    page.locator('tr[data-agent="worker"]').get_by_role("button", name="worker").click()
    title = page.locator("#agent-detail tr", has_text="APPROVED").first.locator("td").nth(2)
    expect(title).to_have_text(HOSTILE_SHOWN)
    with node.client() as http:  # out of the inbox: the keyboard test starts at the top
        http.post("/api/v1/approvals/hostile-1", json={"decision": "deny"}).raise_for_status()


@screenshot_on_failure
def test_nav_and_tables_stay_usable_at_390_px(node, open_page):
    page = open_page(*PHONE)
    sign_in(page, node, ONCALL_TOKEN)
    links = page.locator("nav a")
    expect(links).to_have_count(8)
    for index in range(8):
        link = links.nth(index)
        expect(link).to_be_in_viewport(ratio=1)  # wholly in sight: no nav scrolling needed
        view = link.get_attribute("data-view")
        link.click()
        expect(link).to_have_attribute("aria-current", "page")
        assert page.url.endswith(f"#/{view}")
        expect(page.locator("main h2").first).to_be_visible()
        no_page_overflow(page)
        for wrap in page.locator(".table-wrap").all():  # a table scrolls within its own box
            box = wrap.bounding_box()
            assert box is None or box["x"] + box["width"] <= PHONE[0] + 0.5, view


@screenshot_on_failure
def test_revoke_and_restore_a_grant(node, open_page):
    page = open_page()
    sign_in(page, node, ONCALL_TOKEN, view="grants")
    row = page.locator('tr[data-agent="vault"][data-domain="payments"]')
    expect(row).to_contain_text("active")
    row.get_by_role("button", name="revoke payments from vault").click()
    expect(row).to_contain_text("revoked")
    with node.client() as http:
        [grant] = [g for g in http.get("/api/v1/broker/grants").json() if g["agent"] == "vault"]
        assert grant["status"] == "revoked"
    row.get_by_role("button", name="restore payments to vault").click()
    expect(row).to_contain_text("active")
    with node.client() as http:
        [grant] = [g for g in http.get("/api/v1/broker/grants").json() if g["agent"] == "vault"]
        assert grant["status"] == "active"


@screenshot_on_failure
def test_a_read_only_token_sees_no_action_buttons(node, open_page):
    page = open_page(390, 844)  # and at phone width
    sign_in(page, node, READ_TOKEN)
    expect(payer_row(page).first).to_be_visible()
    expect(page.locator("#whoami")).to_have_text("reader (read)")
    main = page.locator("main")
    expect(main.get_by_role("button", name=re.compile("approve|deny", re.I))).to_have_count(0)
    expect(main.locator("input[type=checkbox]")).to_have_count(0)
    page.keyboard.press("5")  # grants
    expect(page.locator('tr[data-agent="vault"]')).to_contain_text("active")
    expect(main.get_by_role("button", name=re.compile("revoke|restore", re.I))).to_have_count(0)
    page.keyboard.press("3")  # tasks: no create form, no cancel
    expect(page.locator("#task-list")).to_be_visible()
    expect(main.get_by_role("button", name=re.compile("create|cancel", re.I))).to_have_count(0)


@screenshot_on_failure
def test_keyboard_approves_and_the_stream_resumes_after_a_restart(node, open_page):
    page = open_page()
    sign_in(page, node, ADMIN_TOKEN)
    expect(payer_row(page).first).to_be_visible()
    # the first request of the list: the payer's once the tests before have decided the
    # ledger's seeded ones, a ledger's when this test runs alone
    row = page.locator("main li.request").first
    page.keyboard.press("j")
    expect(row).to_be_focused()
    approval_id = row.get_attribute("data-id")
    page.keyboard.press("a")  # approve the focused request
    expect(page.locator(f'li.request[data-id="{approval_id}"]')).to_have_count(0)

    node.terminate()
    expect(page.locator("#stream-state")).to_have_text("reconnecting…")
    node.start()
    expect(page.locator("#stream-state")).to_have_text("live", timeout=30_000)
    # a decision made elsewhere after the restart reaches the page over the resumed stream;
    # the payer's next request may come only after its start and one tick (5 s) after it
    waiting = payer_row(page).first
    expect(waiting).to_be_visible(timeout=30_000)
    waiting_id = waiting.get_attribute("data-id")
    with node.client() as http:
        http.post(f"/api/v1/approvals/{waiting_id}", json={"decision": "deny"}).raise_for_status()
    expect(page.locator(f'li.request[data-id="{waiting_id}"]')).to_have_count(0)
    expect(page.locator("table tr", has_text=waiting_id)).to_contain_text("deny")


@screenshot_on_failure
def test_create_and_cancel_a_task_and_publish_a_component(node, open_page, built_agents):
    page = open_page()
    sign_in(page, node, ADMIN_TOKEN, view="tasks")
    page.get_by_label("To", exact=True).select_option("cashier")
    page.get_by_label("Input (JSON object)").fill('{"pay": {"invoice": "INV-9"}}')
    page.get_by_role("button", name="Create task").click()
    detail = page.locator("#task-detail")
    expect(detail).to_contain_text("running")  # it waits for the spend approval
    expect(detail).to_contain_text("asking to pay")  # its latest progress
    detail.get_by_role("button", name="Cancel task").click()
    expect(detail).to_contain_text("canceled by admin")
    page.get_by_label("Status", exact=True).select_option("failed")
    task_id = page.url.rsplit("/", 1)[1]
    expect(page.locator(f'#task-list tr[data-id="{task_id}"]')).to_contain_text("failed")

    page.keyboard.press("Escape")
    page.goto(f"{node.url}/console/#/registry")
    page.get_by_label("Package id").fill("trap-agent")
    page.get_by_label("Version (SemVer)").fill("1.0.0")
    # a small (WAT-built) component: the node compiles each upload to validate it
    page.get_by_label("Component (.wasm)").set_input_files(str(built_agents["bad_trap"]))
    page.get_by_role("button", name="Publish").click()
    expect(page.locator("#publish-result")).to_contain_text("Published trap-agent 1.0.0")
    expect(page.locator("#package-list")).to_contain_text("trap-agent")
    page.get_by_label("Package id").fill("trap-agent")
    page.get_by_label("Version (SemVer)").fill("1.0.0")
    page.get_by_label("Component (.wasm)").set_input_files(str(built_agents["bad_trap"]))
    page.get_by_role("button", name="Publish").click()
    expect(page.locator("#error")).to_contain_text("publish failed")  # 409: the node's detail


@screenshot_on_failure
def test_the_agent_page_shows_the_deployment_and_its_buttons(node, open_page, built_agents):
    with node.client() as http:
        for package, agent in (("greeter", "hello"), ("trapper", "bad_trap")):
            published = http.post(
                "/api/v1/registry/packages",
                data={"id": package, "version": "1.0.0"},
                files={"wasm": ("a.wasm", built_agents[agent].read_bytes())},
                timeout=120,
            )
            assert published.status_code == 201, published.text
        body = {"component": "registry:greeter@1.0.0", "tick_interval_ms": 500}
        deployed = http.put("/api/v1/agents/greeter", json=body, timeout=120)
        assert deployed.status_code == 201, deployed.text

    reader = open_page(390, 844)
    sign_in(reader, node, READ_TOKEN, view="agents")
    reader.get_by_role("button", name="greeter", exact=True).click()
    panel = reader.locator("#deployment")
    expect(panel).to_contain_text("deployed through the API")
    expect(panel.get_by_role("button")).to_have_count(0)  # no admin scope: no buttons
    expect(reader.locator("#upgrade-form")).to_have_count(0)

    page = open_page()
    sign_in(page, node, ADMIN_TOKEN, view="agents")
    page.get_by_role("button", name="greeter", exact=True).click()
    panel = page.locator("#deployment")
    expect(page.locator("#deploy-revision")).to_have_text("1 (version 1.0.0)")
    panel.get_by_role("button", name="stop greeter").click()
    expect(page.locator("#deploy-state")).to_contain_text("stopped by an operator")
    page.locator("#deployment").get_by_role("button", name="start greeter").click()
    expect(page.locator("#deploy-state")).not_to_contain_text("stopped")
    # an upgrade whose first tick traps: rolled back by the node, which says why
    page.get_by_label("component to upgrade to").fill("registry:trapper@1.0.0")
    page.locator("#upgrade-form").get_by_role("button", name="Upgrade").click()
    expect(page.locator("#error")).to_contain_text("rolled back to revision 1", timeout=60_000)
    history = page.locator("#deployment table")
    expect(history).to_contain_text("rolled back (automatic)")
    expect(page.locator("#deploy-revision")).to_have_text("1 (version 1.0.0)")
    page.once("dialog", lambda dialog: dialog.accept())  # "Remove greeter? ..."
    page.locator("#deployment").get_by_role("button", name="remove greeter").click()
    expect(page.locator('#agent-list tr[data-agent="greeter"]')).to_have_count(0)


@screenshot_on_failure
def test_the_agent_page_shows_a_probation_and_marks_the_automatic_rollback(
    node, open_page, built_agents
):
    """Issue 37 items 3 and 8: the chosen agent's rollout is live (on probation, then rolled
    back automatically by the node, marked as such); a stopped agent says why."""
    with node.client() as http:
        for version, agent in (("1.0.0", "hello"), ("2.0.0", "bad_second_tick")):
            published = http.post(
                "/api/v1/registry/packages",
                data={"id": "watched", "version": version},
                files={"wasm": ("a.wasm", built_agents[agent].read_bytes())},
                timeout=120,
            )
            assert published.status_code == 201, published.text
        body = {"component": "registry:watched@1.0.0", "tick_interval_ms": 300}
        deployed = http.put("/api/v1/agents/watched", json=body, timeout=120)
        assert deployed.status_code == 201, deployed.text

    page = open_page()
    sign_in(page, node, ADMIN_TOKEN, view="agents")
    page.get_by_role("button", name="watched", exact=True).click()
    # its first tick works: the upgrade is answered, then the probation sees the second fail
    page.get_by_label("component to upgrade to").fill("registry:watched@2.0.0")
    page.locator("#upgrade-form").get_by_role("button", name="Upgrade").click()
    expect(page.locator("#deploy-note")).to_contain_text("on probation", timeout=60_000)
    notice = page.locator("#automatic-rollback")
    expect(notice).to_contain_text("Rolled back automatically", timeout=60_000)
    expect(notice).to_contain_text("revision 2 failed its probation")
    expect(page.locator("#deploy-rollout")).to_contain_text("rolled back automatically")
    expect(page.locator("#deploy-revision")).to_have_text("1 (version 1.0.0)")
    expect(page.locator("#deployment table")).to_contain_text("rolled back (automatic)")
    # stopped by an operator: the list says so next to the status
    page.locator("#deployment").get_by_role("button", name="stop watched").click()
    row = page.locator('#agent-list tr[data-agent="watched"]')
    expect(row).to_contain_text("stopped by an operator")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#deployment").get_by_role("button", name="remove watched").click()
    expect(row).to_have_count(0)


@screenshot_on_failure
def test_the_agent_page_keeps_hostile_reasons_escaped_when_it_refreshes(
    node, open_page, built_agents
):
    """Issue 45: the live refresh of the chosen agent's state writes the reason as the first
    render does, escaped (an agent's error is text another party wrote)."""
    with node.client() as http:
        published = http.post(
            "/api/v1/registry/packages",
            data={"id": "deceiver", "version": "1.0.0"},
            files={"wasm": ("a.wasm", built_agents["bad_hostile_err"].read_bytes())},
            timeout=120,
        )
        assert published.status_code == 201, published.text
        body = {"component": "registry:deceiver@1.0.0", "tick_interval_ms": 300}
        deployed = http.put("/api/v1/agents/deceiver", json=body, timeout=120)
        assert deployed.status_code in (201, 422), deployed.text  # its first tick fails
    page = open_page()
    sign_in(page, node, ADMIN_TOKEN, view="agents")
    page.get_by_role("button", name="deceiver", exact=True).click()
    state = page.locator("#deploy-state")
    expect(state).to_contain_text("APPROVED", timeout=30_000)
    # count the refreshes that rewrite it in place, and wait for two of them
    state.evaluate(
        "el => { window.stateWrites = 0; new MutationObserver(() => window.stateWrites++)"
        ".observe(el, {childList: true, characterData: true, subtree: true}); }"
    )
    wait_until(lambda: page.evaluate("() => window.stateWrites") >= 2, timeout=15)
    shown = state.evaluate("el => el.textContent")
    assert HOSTILE_SHOWN in shown and not any(char in shown for char in INVISIBLE), shown
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#deployment").get_by_role("button", name="remove deceiver").click()
    expect(page.locator('#agent-list tr[data-agent="deceiver"]')).to_have_count(0)


USAGE = [
    {
        "route": "cloud",
        "model": "claude",
        "input_tokens": 1200,
        "output_tokens": 300,
        "cost_nanos": 8_100_000,
        "duration_ms": 900,
    },
    {
        "route": "cloud",
        "model": "claude",
        "input_tokens": 800,
        "output_tokens": 100,
        "cost_nanos": 3_900_000,
        "duration_ms": 500,
    },
    {"route": "local", "model": "small", "input_tokens": 50, "output_tokens": 5, "duration_ms": 40},
]


@screenshot_on_failure
def test_the_usage_view_shows_tokens_and_cost_per_agent_and_model(node, open_page):
    page = open_page()
    sign_in(page, node, ONCALL_TOKEN, view="usage")
    claude = page.locator('tr[data-agent="ledger"][data-model="claude"] td')
    expect(claude).to_have_text(["ledger", "claude", "2", "0", "2000", "400", "0.012", "700 ms"])
    expect(page.locator('tr[data-agent="ledger"][data-model="small"] td').nth(6)).to_have_text("0")
    page.get_by_label("Period").select_option("1h")
    expect(claude.nth(2)).to_have_text("2")  # journaled just now: inside the last hour too
