"""What an operator sees is what is there (issue 34 item 5): `visible` escapes every character
a terminal or a browser would act on or not show, and an approval's one-line summary is built
from the request's shape, so padding cannot push the amount out of it."""

from __future__ import annotations

import json
import sys
import unicodedata

import pytest

from node.display.humanize import first_invisible, visible, visible_lines
from node.display.request_summary import summary

INVISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def test_the_written_out_class_is_every_control_format_and_separator_character():
    """The class is written out for speed; it must be exactly the categories it names."""
    missed, extra = [], []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        escaped = visible(char) != char
        if unicodedata.category(char) in INVISIBLE_CATEGORIES and not escaped:
            missed.append(hex(code))
        elif escaped and unicodedata.category(char) not in INVISIBLE_CATEGORIES:
            extra.append(hex(code))
    assert (missed, extra) == ([], [])


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),  # retitle the window
        ("\x1b[2J\x1b[31m", "\\x1b[2J\\x1b[31m"),  # clear the screen, red
        ("row\rAPPROVED", "row\\rAPPROVED"),  # overwrite a row
        ("a\nb\tc\x7f", "a\\nb\\tc\\x7f"),
        ("\x9b2J", "\\x9b2J"),  # C1 CSI: a terminal's ESC [
        ("\u202eevorppa", "\\u202eevorppa"),  # renders "approve"
        ("zero\u200bwidth\ufeff\u2028", "zero\\u200bwidth\\ufeff\\u2028"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lone \ud800", "lone \\ud800"),  # could not even be encoded to the terminal
        ("café 日本 👍 «ok»", "café 日本 👍 «ok»"),  # text is left alone
        ("C:\\path", "C:\\path"),
    ],
)
def test_visible_escapes_what_would_act_or_hide(text, shown):
    assert visible(text) == shown


def test_visible_lines_keeps_only_line_breaks():
    assert visible_lines("one\n\x1b[2Jtwo\r") == "one\n\\x1b[2Jtwo\\r"
    assert first_invisible("fine") is None and first_invisible("a\u202eb") == "\u202e"


def test_the_amount_comes_first_however_the_agent_pads():
    padded = json.dumps({"memo": "x" * 5000, "note": "y" * 900, "amount": 90000, "to": "DE89"})
    detail = summary("spend", padded)
    assert detail.startswith('spend: amount=90000, to="DE89", memo="xxx')
    assert len(detail) <= 1000 and "…" in detail
    memo = detail.split("memo=", 1)[1].split(", ")[0]
    assert len(memo) == 80 and memo.startswith('"x') and memo.endswith('x"')  # middle elided


def test_numbers_then_short_strings_then_long_values_in_their_order():
    request = {"body": {"lines": [1, 2]}, "payee": "acme", "currency": "EUR", "cents": 1250}
    assert summary("spend", json.dumps(request)) == (
        'spend: cents=1250, payee="acme", currency="EUR", body={"lines":[1,2]}'
    )


def test_what_does_not_fit_is_counted():
    request = {f"k{i}": i for i in range(300)}
    detail = summary("spend", json.dumps(request), limit=60)
    assert detail.startswith("spend: k0=0, k1=1, ") and len(detail) <= 60
    shown = detail.count("=")
    assert detail.endswith(f", … +{300 - shown} more")


def test_odd_keys_are_quoted_and_long_ones_elided():
    detail = summary("spend", json.dumps({"a=b, amount": 1, "k" * 100: 2}))
    assert detail.startswith('spend: "a=b, amount"=1, kkk')
    assert len(detail.split(", ")[-1].split("=")[0]) == 40


@pytest.mark.parametrize(
    ("request_text", "detail"),
    [
        ("to: ceo@example.com", "email: to: ceo@example.com"),  # text stays text
        ("[1, 2]", "email: [1, 2]"),
        ("{}", "email: {}"),
        ("[" * 100_000, None),  # nested too deep to read: text, elided
    ],
)
def test_a_request_that_is_not_an_object_is_its_text(request_text, detail):
    shown = summary("email", request_text)
    assert len(shown) <= 1000
    if detail is not None:
        assert shown == detail
    else:
        assert shown.startswith("email: [[[") and "…" in shown


def test_agent_test_report_shows_an_agents_output_as_written():
    """`agent test` runs a component someone else may have written: its log lines, findings
    and stdout cannot print a fake "ok" line or clear the screen."""
    from node.authoring.cli import human_report
    from projections import catalogue as c

    forged = "done\nok\x1b[2J\u202e"
    report = {
        "agent": "echo",
        "component": "echo.wasm",
        "events": [
            {"type": c.Log.type, "level": "info", "message": forged},
            {"type": c.Finding.type, "severity": "high", "title": forged, "detail": "\r"},
            {"type": "output", "stream": "stdout", "line": forged},
        ],
        "state": {"k\n": forged},
        "fault": None,
        "ok": False,
    }
    lines = human_report(report).split("\n")
    assert lines == [
        "agent echo: echo.wasm",
        "   log info: done\\nok\\x1b[2J\\u202e",
        "   finding high: done\\nok\\x1b[2J\\u202e: \\r",
        "   stdout: done\\nok\\x1b[2J\\u202e",
        "state: k\\n=done\\nok\\x1b[2J\\u202e",
        "FAILED",
    ]
