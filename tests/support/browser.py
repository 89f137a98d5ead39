"""A real browser for the tests that need one: the distribution's Chromium (never a download),
driven by Playwright, with every problem a page has collected for the test to assert on.

`LOOPING_TEST_REQUIRE_BROWSER=1` (set by `.ci/run`) turns a missing Chromium into a failure;
`LOOPING_TEST_CHROMIUM` names another binary."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

playwright = pytest.importorskip("playwright.async_api", reason="the docs extra drives a browser")


def chromium() -> str:
    found = os.environ.get("LOOPING_TEST_CHROMIUM") or shutil.which("chromium")
    if found is None:
        if os.environ.get("LOOPING_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail(
                "no chromium: install it (apt-get install chromium) or set LOOPING_TEST_CHROMIUM"
            )
        pytest.skip("no chromium installed (apt-get install chromium)")
    return found


@contextlib.asynccontextmanager
async def watched_page(problems: list[str]) -> AsyncIterator[Any]:
    """A page of a headless Chromium whose every problem goes into `problems`."""
    async with playwright.async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            collect_problems(page, problems)
            yield page
        finally:
            await browser.close()


def collect_problems(page: Any, problems: list[str]) -> None:
    """Every console error or warning, uncaught exception, failed request and HTTP error."""
    page.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning")
            else None
        ),
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "requestfailed",
        lambda request: problems.append(f"failed: {request.url} ({request.failure})"),
    )
    page.on(
        "response",
        lambda response: (
            problems.append(f"HTTP {response.status}: {response.url}")
            if response.status >= 400
            else None
        ),
    )
