"""Shared fixtures: throwaway plugin distributions, really built and installed with pip, a
throwaway PostgreSQL server, and (from `support.fixtures`) gateways and a running agent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psycopg
import pytest

from support.pg_server import PostgresServer

pytest_plugins = [
    "support.fixtures",  # the edge fixtures: gateways, a running agent
    "support.watchdog",  # a hung test fails with every stack instead of holding CI
]
PLUGIN_DISTS = Path(__file__).parent / "plugin_dists"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        help="fuzz the JSON-RPC surface with about 10,000 requests instead of a CI-sized few",
    )


SLOW_FIXTURES = frozenset({"looping_cli", "own_postgres"})
"""A test that asks for one of these runs `looping` as a process, or a PostgreSQL of its own."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `slow` what starts processes (a module's own `pytestmark` marks the rest), so
    `pytest -m "not slow"` runs the in-process suite alone."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where pip installed every distribution of tests/plugin_dists/.

    It is not on `sys.path` until a test asks for `installed_test_plugins`, so the rest of the
    suite never sees these (mostly broken) plugins.
    """
    work = tmp_path_factory.mktemp("plugin-dists")
    sources = work / "src"
    shutil.copytree(PLUGIN_DISTS, sources)  # setuptools writes egg-info beside the sources
    site = work / "site"
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
        "--no-build-isolation", "--target", str(site),
        *sorted(str(path) for path in sources.iterdir() if path.is_dir()),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"pip could not install the test plugins:\n{result.stdout}\n{result.stderr}")
    return site


@pytest.fixture
def installed_test_plugins(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the throwaway plugins on `sys.path` for this test only (monkeypatch undoes it)."""
    monkeypatch.syspath_prepend(str(plugin_site))
    return plugin_site


def _run_looping(
    *args: str,
    site: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LOOPING_")}
    if site is not None:
        environment["PYTHONPATH"] = str(site)
    environment.update(env or {})
    script = Path(sys.executable).with_name("looping")
    return subprocess.run(
        [str(script), *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        check=False,
        timeout=120,
    )


@pytest.fixture
def looping_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the installed `looping` console script in a fresh process.

    `looping_cli("check", "--config", path, site=plugin_site, env={...})`; `site` adds the
    throwaway plugins to that process's path.
    """
    return _run_looping


# -- a throwaway PostgreSQL server ---------------------------------------------------------------

REQUIRE_POSTGRES = "LOOPING_TEST_REQUIRE_POSTGRES"
"""Set (by .ci/run) to make a missing PostgreSQL fail the PostgreSQL tests instead of skipping."""


def _postgres_bin() -> Path | None:
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return installed[-1].parent if installed else None


def postgres_binaries() -> Path:
    """Where pg_ctl is; skips the test without it (fails it with LOOPING_TEST_REQUIRE_POSTGRES)."""
    binaries = _postgres_bin()
    if binaries is None:
        if os.environ.get(REQUIRE_POSTGRES):
            pytest.fail(f"{REQUIRE_POSTGRES} is set but no PostgreSQL (pg_ctl) is installed")
        pytest.skip("PostgreSQL is not installed (pg_ctl not found)")
    return binaries


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The session's PostgreSQL server; yields its admin URL without a database name. Skips
    when PostgreSQL is not installed, unless LOOPING_TEST_REQUIRE_POSTGRES is set. As root it
    runs as the `postgres` user."""
    server = PostgresServer(postgres_binaries())
    server.start()
    try:
        yield server.url
    finally:
        server.remove()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test alone, running: one it may stop and start again."""
    server = PostgresServer(postgres_binaries())
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL server, dropped afterwards."""
    name = f"looping_{uuid.uuid4().hex[:12]}"
    admin = psycopg.connect(f"{postgres_server}/postgres")
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        yield f"{postgres_server}/{name}"
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE {name} WITH (FORCE)")
    finally:
        admin.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The embedded default, then PostgreSQL: tests taking it run on both stores."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url
