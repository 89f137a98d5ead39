"""`[limits]` on both bindings: a caller (or a tenant's callers together) past its request rate
or its turns at once is refused with HTTP 429, `Retry-After` and the error's ErrorInfo, before
anything is written; other callers and tenants go on; a retried messageId still gets its task;
and one tenant's flood of waiting turns does not hold up another tenant's next turn."""

from __future__ import annotations

import asyncio
import uuid

from looping_core.a2a import TaskState
from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.bindings import BINDINGS, send_params, throttled
from support.serving import rows, serving
from support.sse import open_stream, streaming_send

RATES = """
[limits]
caller_requests_per_second = 0.1
tenant_requests_per_second = 0.1
burst_seconds = 30
"""
"""Three requests at once (0.1 per second, 30 seconds' worth), then one per ten seconds."""

TURNS = """
[tenants.bob.limits]
caller_turns = 2
tenant_turns = 3
"""

CAROL = """
[runner]
concurrency = 2

[tenants.bob.limits]
caller_turns = 0
tenant_turns = 0

[tenants.carol]
agent = "support.agents:HoldingAgent"
[tenants.carol.card]
name = "Carol"
description = "Holds turns too."
skills = [{ id = "hold", name = "Hold", description = "Holds.", tags = ["hold"] }]
"""


async def test_a_caller_past_its_rate_is_refused_and_writes_nothing(
    gateway: FakeGateway, binding_name: str
) -> None:
    async with serving(
        gateway, extra=RATES.replace("tenant_requests_per_second = 0.1", ""),
        grpc=binding_name == "grpc",
    ) as agent:  # fmt: skip
        binding = BINDINGS[binding_name](agent, gateway)
        for _ in range(3):  # the burst
            assert (await binding.call("ListTasks", {}, tenant="alice")).ok
        tasks = rows(agent, "tasks")
        answer = await binding.call("SendMessage", send_params(binding, "hi"), tenant="alice")
        assert int(throttled(binding, answer, "RATE_LIMITED")["retryAfterSeconds"]) <= 10
        assert rows(agent, "tasks") == tasks
        assert rows(agent, "push_configs") == 0
        # Another caller has a rate of its own, and so does the same subject of another tenant.
        assert (await binding.call("ListTasks", {}, tenant="alice", subject="other")).ok
        assert (await binding.call("ListTasks", {}, tenant="sdk")).ok


async def test_a_tenants_callers_together_are_held_to_its_rate(
    gateway: FakeGateway, binding_name: str
) -> None:
    async with serving(
        gateway, extra=RATES.replace("caller_requests_per_second = 0.1", ""),
        grpc=binding_name == "grpc",
    ) as agent:  # fmt: skip
        binding = BINDINGS[binding_name](agent, gateway)
        for subject in ("one", "two", "three"):
            assert (await binding.call("ListTasks", {}, tenant="alice", subject=subject)).ok
        answer = await binding.call("ListTasks", {}, tenant="alice", subject="four")
        throttled(binding, answer, "RATE_LIMITED")
        assert (await binding.call("ListTasks", {}, tenant="sdk", subject="four")).ok


async def test_a_refused_request_takes_nothing_from_the_other_bucket(gateway: FakeGateway) -> None:
    """A request the tenant's rate refuses does not count against its caller, and the other
    way round: a caller refused at its own rate leaves the tenant's tokens to others."""
    async with serving(gateway, extra=RATES) as agent:
        binding = BINDINGS["jsonrpc"](agent, gateway)
        for _ in range(3):
            assert (await binding.call("ListTasks", {}, tenant="alice", subject="one")).ok
        for _ in range(5):  # refused at its own rate: the tenant's bucket is not touched...
            throttled(binding, await binding.call("ListTasks", {}, tenant="alice", subject="one"),
                      "RATE_LIMITED")  # fmt: skip
        # ...but it was emptied by the three that passed: the tenant's rate holds for everyone.
        answer = await binding.call("ListTasks", {}, tenant="alice", subject="two")
        throttled(binding, answer, "RATE_LIMITED")


async def test_turns_past_the_callers_and_the_tenants_limit_are_refused_before_any_write(
    gateway: FakeGateway, binding_name: str
) -> None:
    async with serving(gateway, extra=TURNS, grpc=binding_name == "grpc") as agent:
        binding = BINDINGS[binding_name](agent, gateway)
        keys = [uuid.uuid4().hex for _ in range(3)]
        first_id = str(uuid.uuid4())
        first = await binding.call(
            "SendMessage", send_params(binding, keys[0], first_id), tenant="bob"
        )
        second = await binding.call("SendMessage", send_params(binding, keys[1]), tenant="bob")
        assert first.ok, first.body
        assert second.ok, second.body
        written = {table: rows(agent, table) for table in ("tasks", "messages", "push_configs")}

        refused = await binding.call("SendMessage", send_params(binding, "one more"), tenant="bob")
        metadata = throttled(binding, refused, "TOO_MANY_TURNS")
        assert metadata["scope"] == "caller"
        assert metadata["limit"] == "2"
        assert {table: rows(agent, table) for table in written} == written
        # The same message again (a gateway's retry) is no new turn: it gets its task.
        again = await binding.call(
            "SendMessage", send_params(binding, keys[0], first_id), tenant="bob"
        )
        assert again.ok, again.body
        assert again.result["task"]["id"] == first.result["task"]["id"]
        # Another caller fills the tenant's third place; a fourth caller finds the tenant full.
        other = await binding.call(
            "SendMessage", send_params(binding, keys[2]), tenant="bob", subject="other"
        )
        assert other.ok, other.body
        full = await binding.call(
            "SendMessage", send_params(binding, "x"), tenant="bob", subject="z"
        )
        assert throttled(binding, full, "TOO_MANY_TURNS")["scope"] == "tenant"
        # Once a turn has ended, its caller may start another.
        test_agents.RELEASE.setdefault(keys[0], asyncio.Event()).set()
        task_id = first.result["task"]["id"]
        async with asyncio.timeout(10):
            while True:
                got = await binding.call("GetTask", {"id": task_id}, tenant="bob")
                if got.result["status"]["state"] == TaskState.TASK_STATE_COMPLETED.name:
                    break
                await asyncio.sleep(0.02)
        key = uuid.uuid4().hex
        later = await binding.call("SendMessage", send_params(binding, key), tenant="bob")
        assert later.ok, later.body
        for done in (keys[1], keys[2], key):
            test_agents.RELEASE.setdefault(done, asyncio.Event()).set()


async def test_one_tenants_flood_waits_behind_another_tenants_next_turn(
    gateway: FakeGateway,
) -> None:
    """Two slots; bob floods ten held turns (two run, eight wait); then carol sends one. As
    bob's running turns end one at a time, carol's starts at the second slot freed at the
    latest (bob's tenant is ahead of it in the round once), not after bob's eight."""
    async with serving(gateway, extra=CAROL) as agent:
        binding = BINDINGS["jsonrpc"](agent, gateway)
        flood = [f"flood-{uuid.uuid4().hex}" for _ in range(10)]
        answers = await asyncio.gather(
            *(binding.call("SendMessage", send_params(binding, key), tenant="bob") for key in flood)
        )
        assert all(answer.ok for answer in answers)
        bob = {answer.result["task"]["id"]: key for answer, key in zip(answers, flood, strict=True)}
        await started_count(list(bob), 2)
        carol_key = f"carol-{uuid.uuid4().hex}"
        sent = await binding.call("SendMessage", send_params(binding, carol_key), tenant="carol")
        assert sent.ok
        carol = sent.result["task"]["id"]
        freed = 0
        while carol not in test_agents.RUNS:
            running = [task for task in bob if test_agents.RUNS[task] and not released(bob[task])]
            test_agents.RELEASE.setdefault(bob[running[0]], asyncio.Event()).set()
            freed += 1
            await started_count([*bob, carol], 2 + freed)
        waiting = sum(1 for task in bob if not test_agents.RUNS[task])
        assert freed <= 2, f"carol's turn started after {freed} of bob's turns ended"
        assert waiting >= 6  # bob's backlog was still there
        for key in [*flood, carol_key]:
            test_agents.RELEASE.setdefault(key, asyncio.Event()).set()


def released(key: str) -> bool:
    event = test_agents.RELEASE.get(key)
    return event is not None and event.is_set()


async def started_count(task_ids: list[str], count: int) -> None:
    async with asyncio.timeout(10):
        while sum(1 for task in task_ids if test_agents.RUNS[task]) < count:
            await asyncio.sleep(0.01)


async def test_a_streaming_send_past_the_turn_limit_is_refused_and_holds_no_stream(
    gateway: FakeGateway,
) -> None:
    """SendStreamingMessage is held to the same limit, answered with the error (not a stream),
    and the stream slot it reserved is given back."""
    limits = TURNS + "[streaming]\nmax_streams_per_caller = 1\n"
    async with serving(gateway, extra=limits) as agent:
        keys = [uuid.uuid4().hex for _ in range(2)]
        binding = BINDINGS["jsonrpc"](agent, gateway)
        for key in keys:
            assert (await binding.call("SendMessage", send_params(binding, key), tenant="bob")).ok
        for _ in range(2):  # twice: the first refusal gave its stream slot back
            async with open_stream(
                agent.endpoint, gateway, "SendStreamingMessage",
                streaming_send(gateway, "one more"), tenant="bob",
            ) as refused:  # fmt: skip
                assert refused.status == 429
                error = (await refused.json())["error"]
                assert error["data"][0]["reason"] == "TOO_MANY_TURNS"
        for key in keys:
            test_agents.RELEASE.setdefault(key, asyncio.Event()).set()
