"""The inspection read on both stores: one task with everything stored about it (the caller's
session for the task, each subtask with its subagent's conversation, its pushes), for its owner
only."""

from __future__ import annotations

import uuid

import attrs
import pytest

from looping_core.a2a import Message, Part, Role, TaskPushNotificationConfig, TaskState
from looping_core.content import AssistantMessage, TextBlock, UserMessage
from looping_core.contract import Identity, SessionRef, SubtaskRecord
from looping_core.store.internal import (
    Database,
    SessionStore,
    SubtaskStore,
    TaskInspection,
    TaskNotFound,
    TaskStore,
)

ALICE = Identity("t", "https://gw.example", "alice")
SEPARATOR = "\x1f"


async def test_the_owner_reads_the_task_its_conversation_its_plan_and_its_pushes(
    database: Database,
) -> None:
    tasks, sessions, subtasks = TaskStore(database), SessionStore(database), SubtaskStore(database)
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="go"),))
    push = TaskPushNotificationConfig(url="https://gw.example/push", token="s3cret-token")
    task = (await tasks.start_turn(ALICE, message, push)).task
    assert await tasks.begin_turn(task.id) is not None
    here = SessionRef(ALICE, task.context_id)
    await sessions.append(here, [UserMessage((TextBlock("earlier"),))], task_id="older-task")
    await sessions.append(
        here,
        [UserMessage((TextBlock("go"),)), AssistantMessage((TextBlock("planning"),))],
        task_id=task.id,
        turn=message.message_id,
    )
    fingerprint = "f" * 64
    await subtasks.add([SubtaskRecord(task.id, "p1/a", "research", {"topic": "milk"})])
    await subtasks.update(
        attrs.evolve(
            (await subtasks.subtasks(task.id))[0],
            state="done",
            result="milk, twice",
            attempts=1,
            fingerprint=fingerprint,
            wave=1,
            usage={"input_tokens": 3, "output_tokens": 2},
        )
    )
    subagent = SEPARATOR.join((task.context_id, task.id, f"p1/a@{fingerprint[:16]}"))
    await sessions.append(
        SessionRef(ALICE, subagent), [AssistantMessage((TextBlock("milk, twice"),))]
    )
    reply = Message(message_id="r1", role=Role.ROLE_AGENT, parts=(Part(text="done"),))
    assert await tasks.transition(
        task.id, TaskState.TASK_STATE_COMPLETED, status_message=reply, reply=reply
    )

    found = await TaskInspection(database).inspect(ALICE, task.id)

    assert found["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["messageId"] for m in found["task"]["history"]] == [message.message_id, "r1"]
    assert [e["seq"] for e in found["events"]] == [1, 2]
    said = [entry["message"]["content"][0]["text"] for entry in found["conversation"]]
    assert said == ["go", "planning"]  # this task's only: not another task's in the session
    [planned] = found["subtasks"]
    assert (planned["id"], planned["state"], planned["wave"]) == ("p1/a", "done", 1)
    assert planned["usage"] == {"input_tokens": 3, "output_tokens": 2}
    assert [e["message"]["content"][0]["text"] for e in planned["conversation"]] == ["milk, twice"]
    [queued] = found["pushes"]
    assert queued["state"] == "pending"
    assert queued["url"] == "https://gw.example/push"
    assert "s3cret-token" not in str(found)


@pytest.mark.parametrize(
    "stranger",
    [
        Identity("t", "https://gw.example", "mallory"),  # another subject
        Identity("t", "https://other.example", "alice"),  # the same subject at another gateway
        Identity("u", "https://gw.example", "alice"),  # another tenant
    ],
)
async def test_another_callers_inspection_finds_nothing(
    database: Database, stranger: Identity
) -> None:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="go"),))
    task = (await TaskStore(database).start_turn(ALICE, message, None)).task
    with pytest.raises(TaskNotFound):
        await TaskInspection(database).inspect(stranger, task.id)
