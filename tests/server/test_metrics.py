"""Prometheus metrics from `looping serve` with two workers: one scrape, whichever worker answers
it, counts what both did (requests, token refusals, key-set fetches, turns, pushes, the store,
models and tools), and what a killed worker counted stays counted."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from looping_core.testing import FakeGateway, FakeModelServer, Reply, ed25519_private_jwk

from support.ports import unused_ports
from support.served import children, has_exited, serve, wait_until_all_listen, write_config
from support.serving import keeper

KEY = ed25519_private_jwk("agent-key-1")
TURNS = 40
SENDS = {"binding": "jsonrpc", "method": "SendMessage"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


async def scrape(port: int) -> tuple[str, Samples]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        text = await response.text()
        samples: Samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return response.headers["Content-Type"], samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


async def scrape_until(port: int, name: str, at_least: float, **labels: str) -> Samples:
    async with asyncio.timeout(20):
        while True:
            _, samples = await scrape(port)
            if value(samples, name, **labels) >= at_least:
                return samples
            await asyncio.sleep(0.05)


async def test_one_scrape_counts_what_both_workers_did(
    tmp_path: Path, gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    port, metrics_port = unused_ports(2)
    more = f"[observability]\nmetrics_port = {metrics_port}\n" + keeper(model_server.base_url)
    more += "[prices.m]\ninput = 1250.0\noutput = 5000.0\n"
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=2, more=more)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    endpoint = f"http://127.0.0.1:{port}/a2a"
    released = tmp_path / "released"
    released.touch()
    before = metrics_directories()
    server = await serve(config, port, KEY)
    try:
        await wait_until_all_listen(server, port, 2)
        await wait_until_all_listen(server, metrics_port, 2)
        await send_traffic(gateway, endpoint, f"file:{released}", model_server)
        await gateway.wait_for_pushes(TURNS + 1, timeout=60)
        samples = await scrape_until(
            metrics_port, "looping_push_deliveries_total", TURNS + 1, outcome="delivered"
        )
        content_type, _ = await scrape(metrics_port)
        assert content_type.startswith("text/plain")
        check_counts(samples)
        # Both workers served (the kernel spread 41 connections): each owns tasks it accepted.
        with sqlite3.connect(tmp_path / "looping.db") as db:
            owners = db.execute("SELECT DISTINCT worker FROM tasks ORDER BY worker").fetchall()
        assert owners == [(0,), (1,)]

        # Whichever worker answers a scrape, it is the whole server's count.
        for _ in range(8):
            _, again = await scrape(metrics_port)
            assert value(again, "looping_requests_total", **SENDS) == TURNS + 1

        # A killed worker's counts stay; its replacement adds to them.
        victim = children(server)[0]
        os.kill(victim, signal.SIGKILL)
        async with asyncio.timeout(30):
            while not has_exited(victim) or victim in children(server):
                await asyncio.sleep(0.05)
        await wait_until_all_listen(server, port, 2)
        await wait_until_all_listen(server, metrics_port, 2)
        _, after = await scrape(metrics_port)
        assert value(after, "looping_requests_total", **SENDS) == TURNS + 1
        assert value(after, "looping_turns_total", outcome="completed") == TURNS + 1
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    # The directory it made for the workers' values is gone with it.
    assert metrics_directories() == before


def metrics_directories() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if "looping-metrics-" in name}


async def send_traffic(
    gateway: FakeGateway, endpoint: str, text: str, model_server: FakeModelServer
) -> None:
    """TURNS turns at once, a call without a token, then one turn that calls a model and a
    tool."""
    replies = await asyncio.gather(
        *(gateway.send_turn(endpoint, tenant="bob", text=text) for _ in range(TURNS))
    )
    assert {status for status, _ in replies} == {200}
    async with (
        aiohttp.ClientSession() as session,
        session.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"}) as no,
    ):
        assert no.status == 401  # no token
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
        Reply.text("Noted."),
    ]
    status, _ = await gateway.send_turn(endpoint, tenant="keeper", text="remember milk")
    assert status == 200


def check_counts(samples: Samples) -> None:
    assert value(samples, "looping_requests_total", outcome="ok", **SENDS) == TURNS + 1
    assert value(samples, "looping_request_duration_seconds_count", **SENDS) == TURNS + 1
    assert value(samples, "looping_requests_total", outcome="unauthenticated") == 1
    assert value(samples, "looping_token_refusals_total", check="token-missing") == 1
    fetches = value(samples, "looping_jwks_fetches_total", outcome="ok")
    assert 1 <= fetches <= 2  # once per worker at most
    # The concurrent first tokens waited for that fetch; the later ones found the key.
    assert value(samples, "looping_jwks_cache_hits_total") >= 1
    assert value(samples, "looping_turns_total", outcome="completed") == TURNS + 1
    assert value(samples, "looping_turn_duration_seconds_count") == TURNS + 1
    assert value(samples, "looping_turns_waiting") == 0
    assert value(samples, "looping_turns_running") == 0
    assert value(samples, "looping_push_attempts_total", result="2xx") == TURNS + 1
    assert value(samples, "looping_push_oldest_pending_seconds") == 0
    assert value(samples, "looping_store_batch_jobs_count") > 0
    assert value(samples, "looping_store_commit_seconds_count") > 0
    model = {"provider": "openai", "model": "m"}
    assert value(samples, "looping_model_calls_total", outcome="ok", **model) == 2
    assert value(samples, "looping_model_tokens_total", kind="input", **model) > 0
    # 30 tokens in at 1250 and 13 out at 5000 per million, by the tenant that spent it.
    cost = value(samples, "looping_model_cost_total", tenant="keeper", **model)
    assert cost == pytest.approx((30 * 1250 + 13 * 5000) / 1_000_000, rel=1e-9)
    assert value(samples, "looping_tool_calls_total", tool="add_note", outcome="ok") == 1
    # OpenTelemetry's GenAI client metrics, as a Prometheus exporter names them.
    genai = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai"}
    genai["gen_ai_request_model"] = "m"
    used = "gen_ai_client_token_usage"
    assert value(samples, f"{used}_count", gen_ai_token_type="input", **genai) == 2
    assert value(samples, f"{used}_sum", gen_ai_token_type="input", **genai) == 30
    assert value(samples, f"{used}_sum", gen_ai_token_type="output", **genai) == 13
    took = "gen_ai_client_operation_duration_seconds_count"
    assert value(samples, took, error_type="", **genai) == 2
