"""The built site opens in a real browser: headless Chromium (the distribution's own, driven by
Playwright) loads the home page and a tutorial from a real HTTP server on 127.0.0.1, finds them
rendered with their navigation and code, follows a link and searches, and no page logs an error
or fails to load anything.

Needs the docs extra (mkdocs, playwright) and a Chromium; `.ci/run` installs Debian's and sets
`LOOPING_TEST_REQUIRE_BROWSER=1`, which turns a missing browser into a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

pytest.importorskip("mkdocs", reason="the docs extra builds the site")
playwright = pytest.importorskip("playwright.async_api", reason="the docs extra drives a browser")

from support.browser import watched_page  # noqa: E402 - after the skips above

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(built)],
        cwd=ROOT,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    return built


@pytest.fixture
async def site_url(site: Path) -> AsyncIterator[str]:
    """The built site over HTTP, as a static host serves it (a folder answers its index.html)."""

    async def serve(request: web.Request) -> web.StreamResponse:
        path = (site / request.match_info["path"]).resolve()
        if not path.is_relative_to(site.resolve()):
            raise web.HTTPNotFound
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            raise web.HTTPNotFound
        return web.FileResponse(path)

    app = web.Application()
    app.router.add_get("/{path:.*}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def _heading(page: Any) -> str:
    """The page's title as shown (without the permalink sign the heading carries)."""
    text: str = await page.locator("article h1").inner_text()
    return text.removesuffix("¶").strip()


async def test_the_home_page_and_a_tutorial_render_with_navigation(
    site_url: str, tmp_path: Path
) -> None:
    problems: list[str] = []
    async with watched_page(problems) as page:
        await page.goto(site_url)
        assert await page.title() == "looping-core"
        assert await _heading(page) == "looping-core"
        navigation = page.locator("nav.md-nav--primary")
        for section in ("Tutorials", "Guides", "Concepts", "Reference", "Benchmarks"):
            assert await navigation.get_by_text(section, exact=True).count() >= 1, section
        await page.screenshot(path=tmp_path / "home.png", full_page=True)

        # A link of the home page's own text leads to the first tutorial.
        await page.locator("article").get_by_role("link", name="Your first turn").first.click()
        await page.wait_for_url("**/first-turn/")
        assert await _heading(page) == "Your first turn"
        assert await page.locator("article pre code").count() >= 3
        assert "looping send" in await page.locator("article").inner_text()
        contents = page.locator("nav.md-nav--secondary")
        assert await contents.get_by_text("The model-driven tenants, offline").count() >= 1
        await page.screenshot(path=tmp_path / "first-turn.png", full_page=True)

        # The search index was built and the search runs in the page.
        await page.wait_for_load_state("networkidle")  # the index, fetched by a worker
        search = page.locator("input.md-search__input")
        await search.click()
        await search.press_sequentially("compaction")
        results = page.locator(".md-search-result__item")
        await results.first.wait_for(timeout=10_000)
        assert await results.count() >= 1
    assert problems == []


async def test_a_page_that_fails_to_load_something_is_caught(site_url: str) -> None:
    """The watch above can fail: a missing page and a script error are both reported."""
    problems: list[str] = []
    async with watched_page(problems) as page:
        await page.goto(site_url + "no-such-page/")
        await page.goto(site_url)
        await page.evaluate("setTimeout(() => { throw new Error('broken script') })")
        await page.wait_for_timeout(200)
    assert any(problem.startswith("HTTP 404: ") for problem in problems), problems
    assert any("broken script" in problem for problem in problems), problems


def _nav_pages() -> dict[str, list[str]]:
    """Every page of the site's navigation (its source path), by section."""
    import yaml  # noqa: PLC0415 - the docs extra's

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    sections: dict[str, list[str]] = {}

    def walk(entries: Any, section: str) -> None:
        for entry in entries:
            if isinstance(entry, str):
                sections.setdefault(section, []).append(entry)
                continue
            for title, value in entry.items():
                if isinstance(value, str):
                    sections.setdefault(section, []).append(value)
                else:
                    walk(value, title)

    walk(nav, "")
    return sections


OVERFLOWING = """() => [...document.querySelectorAll("article div.highlight pre > code")]
   .filter((code) => code.scrollWidth > code.clientWidth + 1)
   .map((code) => code.innerText.split("\\n").find((line) => line.length > 0) || "")"""


async def test_every_command_fits_its_box_and_every_tutorial_has_contents(site_url: str) -> None:
    """At 1280 px, no code block of any page is wider than its box (a reader must see a whole
    command to copy it; long lines wrap), and every tutorial has a table of contents."""
    sections = _nav_pages()
    problems: list[str] = []
    overflowing: dict[str, list[str]] = {}
    without_contents = []
    async with watched_page(problems) as page:
        await page.set_viewport_size({"width": 1280, "height": 900})
        for section, pages in sections.items():
            for source in pages:
                url = site_url + ("" if source == "index.md" else source.removesuffix(".md") + "/")
                await page.goto(url)
                wide = await page.evaluate(OVERFLOWING)
                if wide:
                    overflowing[source] = wide
                if section == "Tutorials":
                    links = page.locator("nav.md-nav--secondary a.md-nav__link")
                    if await links.count() == 0:
                        without_contents.append(source)
    assert overflowing == {}, "code blocks wider than their box, by page (first lines)"
    assert without_contents == [], "tutorials with no table of contents (no ## headings)"
    # Going from page to page at once cuts off what a page still loaded (its favicon, the
    # search index): that is the test's doing, not the page's.
    assert [problem for problem in problems if "net::ERR_ABORTED" not in problem] == []


def test_every_code_example_of_the_api_pages_is_highlighted(site: Path) -> None:
    """A docstring's example is a fenced block with its language (an indented one renders as
    plain text): every code block of the API pages has highlighted tokens."""
    plain = {}
    for page in sorted((site / "api").glob("*/index.html")):
        blocks = page.read_text().split('<div class="highlight"><pre><span></span><code>')[1:]
        unmarked = [block.split("</code>", 1)[0] for block in blocks]
        unmarked = [code for code in unmarked if '<span class="' not in code]
        if unmarked:
            plain[page.parent.name] = [code.splitlines()[0] for code in unmarked]
    assert plain == {}
