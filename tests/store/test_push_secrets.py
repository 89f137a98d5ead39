"""Push configs' secrets at rest, on SQLite and PostgreSQL: sealed in the row, never read back,
opened to deliver; a store sealed with a key the server lacks is refused; a rotation seals old
and clear rows with the current key while every value stays readable."""

from __future__ import annotations

import attrs
import pytest

from looping_core.a2a import (
    AuthenticationInfo,
    Message,
    Part,
    Role,
    TaskPushNotificationConfig,
    TaskState,
)
from looping_core.contract import Identity
from looping_core.store.internal import (
    Database,
    PushSecrets,
    SecretsUnreadable,
    TaskStore,
    check_sealed_secrets,
    seal_again,
)

ALICE = Identity(tenant="t", issuer="https://gw.example", subject="alice")
OLD, NEW = b"o" * 32, b"n" * 32
TOKEN, CREDENTIALS = "the-push-token-value", "the-credentials-value"


def config() -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(
        url="https://gateway.example/push",
        token=TOKEN,
        authentication=AuthenticationInfo(scheme="Bearer", credentials=CREDENTIALS),
    )


def message(text: str = "hi") -> Message:
    return Message(message_id=text, role=Role.ROLE_USER, parts=(Part(text=text),))


async def bodies(database: Database) -> str:
    rows = await database.run(lambda: database.execute("SELECT body FROM push_configs").fetchall())
    return "".join(body for (body,) in rows)


async def delivered(store: TaskStore, task_id: str) -> tuple[str, tuple[str, str] | None]:
    """What the next push to the task's config would carry."""
    assert await store.begin_turn(task_id) is not None
    reply = Message(message_id=f"r-{task_id}", role=Role.ROLE_AGENT, parts=(Part(text="done"),))
    await store.end_turn(task_id, TaskState.TASK_STATE_COMPLETED, reply=reply)
    [item] = await store.untried_pushes(task_id)
    return item.token, item.authentication


async def test_secrets_are_sealed_never_read_back_and_opened_to_deliver(database: Database) -> None:
    store = TaskStore(database, secrets=PushSecrets(NEW))
    task = (await store.start_turn(ALICE, message(), config())).task
    text = await bodies(database)
    assert TOKEN not in text
    assert CREDENTIALS not in text
    assert '"token":"lps1.' in text
    [listed] = await store.list_push_configs(ALICE, task.id)
    assert listed.token == ""
    assert listed.authentication == AuthenticationInfo(scheme="Bearer")
    assert await store.get_push_config(ALICE, task.id, listed.id) == listed
    assert await delivered(store, task.id) == (TOKEN, ("Bearer", CREDENTIALS))


def test_a_sealed_value_moved_to_another_row_does_not_open() -> None:
    secrets = PushSecrets(NEW)
    sealed = secrets.seal(TOKEN, "task-1/config-1/token")
    assert secrets.open(sealed, "task-1/config-1/token") == TOKEN
    with pytest.raises(SecretsUnreadable, match="does not open"):
        secrets.open(sealed, "task-2/config-1/token")


async def test_a_store_sealed_with_a_key_the_server_lacks_is_refused(database: Database) -> None:
    store = TaskStore(database, secrets=PushSecrets(OLD))
    await store.start_turn(ALICE, message(), config())
    old_id = PushSecrets(OLD).current_id
    with pytest.raises(SecretsUnreadable) as refused:
        await database.run(check_sealed_secrets, database, PushSecrets(NEW))
    said = str(refused.value)
    assert f"sealed with key {old_id}, which this server does not have" in said
    assert "[store] previous_secrets_keys" in said
    assert TOKEN not in said


async def test_a_rotation_seals_old_and_clear_rows_again_and_all_stay_readable(
    database: Database,
) -> None:
    old = TaskStore(database, secrets=PushSecrets(OLD))
    sealed_old = (await old.start_turn(ALICE, message("a"), config())).task
    clear = TaskStore(database)  # as an older release stored them: in clear
    in_clear = (await clear.start_turn(ALICE, message("b"), config())).task
    assert TOKEN in await bodies(database)
    rotating = PushSecrets(NEW, previous=[OLD])
    await database.run(check_sealed_secrets, database, rotating)  # both keys: fine
    # Until the rows are sealed again, the old key's values still open.
    during = TaskStore(database, secrets=rotating)
    assert (await during.list_push_configs(ALICE, sealed_old.id))[0].token == ""
    assert await database.run(seal_again, database, rotating) == 2
    assert await database.run(seal_again, database, rotating) == 0  # nothing left
    assert TOKEN not in await bodies(database)
    after = PushSecrets(NEW)  # the old key can go now
    await database.run(check_sealed_secrets, database, after)
    store = TaskStore(database, secrets=after)
    for task in (sealed_old, in_clear):
        assert await delivered(store, task.id) == (TOKEN, ("Bearer", CREDENTIALS))


async def test_a_config_without_secrets_is_not_sealed(database: Database) -> None:
    store = TaskStore(database, secrets=PushSecrets(NEW))
    plain = attrs.evolve(config(), token="", authentication=None)
    await store.start_turn(ALICE, message(), plain)
    keys = await database.run(
        lambda: database.execute("SELECT secrets_key FROM push_configs").fetchall()
    )
    assert keys == [(None,)]
