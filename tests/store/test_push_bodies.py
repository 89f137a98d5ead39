"""A push's body is the task as the write that queued it left it, built from what that write
holds (its status, its metadata, the artifacts' stored JSON): the same task a read gives, on
both stores."""

from __future__ import annotations

import json
import uuid

from looping_core.a2a import (
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
    to_wire,
)
from looping_core.contract import Identity
from looping_core.store.internal import Database, JobTicket, TaskStore

ALICE = Identity("t", "https://gateway.example", "alice")
PUSH = TaskPushNotificationConfig(url="https://gateway.example/push", token="t0k")


def _message(role: Role, text: str, task_id: str = "") -> Message:
    return Message(
        message_id=str(uuid.uuid4()), role=role, parts=(Part(text=text),), task_id=task_id
    )


async def test_a_pushed_end_is_the_task_as_a_read_gives_it(database: Database) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, _message(Role.ROLE_USER, "hi"), PUSH)).task
    assert await store.begin_turn(task.id) is not None
    first = Artifact(artifact_id="a1", parts=(Part(text="draft \u00e9\u2028"),), name="one")
    question = _message(Role.ROLE_AGENT, "which one?")  # unaddressed: the store addresses it
    asked = await store.end_turn(
        task.id,
        TaskState.TASK_STATE_INPUT_REQUIRED,
        status_message=question,
        reply=question,
        artifacts=[first],
        metadata={"looping.usage": {"input_tokens": 3}, "note": "\u00fcber"},
        job=JobTicket(1),
    )
    # The first end's artifacts are all this write's: the body is spliced without a read.
    [first_push] = asked.pushes or ()
    after_first = await store.get(ALICE, task.id, history_length=0)
    assert json.loads(first_push.body) == to_wire(StreamResponse(task=after_first))
    follow_up = _message(Role.ROLE_USER, "the blue one", task.id)
    follow_up = Message(
        message_id=follow_up.message_id, role=Role.ROLE_USER, parts=follow_up.parts,
        task_id=task.id, context_id=task.context_id,
    )  # fmt: skip
    assert (await store.start_turn(ALICE, follow_up, None)).started
    assert await store.begin_turn(task.id) is not None
    second = Artifact(artifact_id="a2", parts=(Part(data={"n": 1.5, "list": [1, None]}),))
    answer = _message(Role.ROLE_AGENT, "done")
    ended = await store.end_turn(
        task.id,
        TaskState.TASK_STATE_COMPLETED,
        status_message=answer,
        reply=answer,
        artifacts=[second, Artifact(artifact_id="a1", parts=(Part(text="final"),))],
        job=JobTicket(2),
    )
    for end in (asked, ended):
        assert end.won
        assert end.pushes is not None
    [asked_push] = asked.pushes or ()
    [ended_push] = ended.pushes or ()
    assert json.loads(asked_push.body)["task"]["status"]["message"]["taskId"] == task.id
    read = await store.get(ALICE, task.id, history_length=0)
    assert json.loads(ended_push.body) == to_wire(StreamResponse(task=read))
    # The first turn's artifact was replaced in place; the metadata kept from the first end.
    assert [a["artifactId"] for a in json.loads(ended_push.body)["task"]["artifacts"]] == [
        "a1", "a2",
    ]  # fmt: skip
    assert json.loads(ended_push.body)["task"]["metadata"]["note"] == "\u00fcber"


async def test_an_artifact_written_twice_in_one_end_is_pushed_once_in_its_place(
    database: Database,
) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, _message(Role.ROLE_USER, "hi"), PUSH)).task
    assert await store.begin_turn(task.id) is not None
    artifacts = [
        Artifact(artifact_id="a1", parts=(Part(text="draft"),)),
        Artifact(artifact_id="a2", parts=(Part(text="other"),)),
        Artifact(artifact_id="a1", parts=(Part(text="final"),)),
    ]
    ended = await store.end_turn(
        task.id, TaskState.TASK_STATE_COMPLETED, artifacts=artifacts, job=JobTicket(1)
    )
    [push] = ended.pushes or ()
    read = await store.get(ALICE, task.id, history_length=0)
    assert json.loads(push.body) == to_wire(StreamResponse(task=read))
    pushed = json.loads(push.body)["task"]["artifacts"]
    assert [(a["artifactId"], a["parts"][0]["text"]) for a in pushed] == [
        ("a1", "final"),
        ("a2", "other"),
    ]


async def test_a_canceled_task_without_metadata_or_artifacts(database: Database) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, _message(Role.ROLE_USER, "hi"), PUSH)).task
    await store.cancel(ALICE, task.id)
    [item] = await store.untried_pushes(task.id)
    read = await store.get(ALICE, task.id, history_length=0)
    assert json.loads(item.body) == to_wire(StreamResponse(task=read))
    assert set(json.loads(item.body)["task"]) == {"id", "contextId", "status"}
