"""Push configs: the caller's, per task. Deleting one drops its queued pushes, so nothing more is
sent there."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from looping_core._random import uuid4
from looping_core.a2a import TaskPushNotificationConfig, from_wire
from looping_core.a2a.internal import undeliverable_reason
from looping_core.contract import Identity
from looping_core.store._errors import PushConfigNotFound
from looping_core.store._models import PushConfigRow, PushOutbox
from looping_core.store._rows import StoreBase, dump
from looping_core.store._secrets import PushSecrets

PUSH_CONFIG_INSERT = (
    "INSERT INTO push_configs (task_id, config_id, body, secrets_key, target_checked,"
    " undeliverable)"
)
PUSH_CONFIG_REPLACING = (
    "ON CONFLICT (task_id, config_id) DO UPDATE SET body = excluded.body,"
    " secrets_key = excluded.secrets_key, target_checked = excluded.target_checked,"
    " undeliverable = NULL"
)
"""A config written again with the same id replaces the one there."""

__all__ = [
    "PUSH_CONFIG_INSERT",
    "PUSH_CONFIG_REPLACING",
    "PushConfigs",
    "opened_settings",
    "sealed_config",
    "target_verdict",
    "without_secrets",
]


def without_secrets(config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
    """A config as a reader gets it: its `token` and `authentication.credentials` left out
    (they are the caller's to send, never to read back: write-only, as A2A's next version
    requires); the scheme stays, so a reader sees that credentials are set."""
    authentication = config.authentication
    if authentication is not None:
        authentication = attrs.evolve(authentication, credentials="")
    return attrs.evolve(config, token="", authentication=authentication)


def _where(task_id: str, config_id: str, field: str) -> str:
    return f"{task_id}/{config_id}/{field}"


def sealed_config(
    secrets: PushSecrets | None, config: TaskPushNotificationConfig
) -> tuple[TaskPushNotificationConfig, str | None]:
    """`config` with its secrets sealed, and the id of the key that sealed them (`None`: none
    to seal, or no sealing)."""
    credentials = config.authentication.credentials if config.authentication else ""
    if secrets is None or not (config.token or credentials):
        return config, None
    task_id, config_id = config.task_id, config.id
    authentication = config.authentication
    if authentication is not None:
        where = _where(task_id, config_id, "credentials")
        authentication = attrs.evolve(authentication, credentials=secrets.seal(credentials, where))
    token = secrets.seal(config.token, _where(task_id, config_id, "token"))
    return attrs.evolve(config, token=token, authentication=authentication), secrets.current_id


def target_verdict(
    sql: Callable[..., Any],
    task_id: str,
    config_id: str,
    settings: dict[str, Any],
    *,
    checked: object,
    verdict: str | None,
) -> str:
    """Why a stored config's target cannot be delivered to ("" if it can), checked once (store
    thread; `settings` opened, `sql` runs a statement). A config the edge wrote was checked
    there (`checked`: the row's `target_checked`, and `verdict` its `undeliverable`); one an
    older release wrote is checked now, and the verdict kept on its row."""
    if checked:
        return verdict or ""
    auth = settings.get("authentication")
    found = undeliverable_reason(
        settings.get("url", ""),
        settings.get("token", ""),
        auth.get("scheme", "") if auth else None,
        auth.get("credentials", "") if auth else "",
    )
    sql(
        "UPDATE push_configs SET target_checked = ?, undeliverable = ?"
        " WHERE task_id = ? AND config_id = ?",
        (True, found or None, task_id, config_id),
    )
    return found


def opened_settings(
    secrets: PushSecrets | None, task_id: str, config_id: str, settings: dict[str, Any]
) -> dict[str, Any]:
    """A stored config's JSON with its secrets opened, to deliver a push (`SecretsUnreadable`
    when this server lacks their key)."""
    if secrets is None:
        return settings
    opened = dict(settings)
    if opened.get("token"):
        opened["token"] = secrets.open(opened["token"], _where(task_id, config_id, "token"))
    auth = opened.get("authentication")
    if isinstance(auth, dict) and auth.get("credentials"):
        where = _where(task_id, config_id, "credentials")
        opened["authentication"] = {**auth, "credentials": secrets.open(auth["credentials"], where)}
    return opened


class PushConfigs(StoreBase):
    async def put_push_config(
        self, caller: Identity, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        def write() -> TaskPushNotificationConfig:
            with self._db.write():
                self._owned(caller, config.task_id)
                return self.write_push_config(config.task_id, config)

        return await self._db.run(write)

    def write_push_config(
        self, task_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        stored, row = self.push_config_row(task_id, config)
        self._sql(f"{PUSH_CONFIG_INSERT} VALUES (?, ?, ?, ?, ?, NULL) {PUSH_CONFIG_REPLACING}", row)
        return stored

    def push_config_row(
        self, task_id: str, config: TaskPushNotificationConfig
    ) -> tuple[TaskPushNotificationConfig, tuple[Any, ...]]:
        """The config as stored, and its row's first five values (`PUSH_CONFIG_INSERT`; the
        sixth, `undeliverable`, is NULL): sealed, with its target checked."""
        stored = attrs.evolve(config, task_id=task_id, id=config.id or str(uuid4()), tenant="")
        sealed, key_id = sealed_config(self._secrets, stored)
        # The edge checked its target (`check_push_config`): the one check it gets.
        return stored, (task_id, stored.id, dump(sealed), key_id, True)

    async def get_push_config(
        self, caller: Identity, task_id: str, config_id: str
    ) -> TaskPushNotificationConfig:
        def read() -> TaskPushNotificationConfig:
            self._owned(caller, task_id)
            row = PushConfigRow.get_or_none(
                (PushConfigRow.task == task_id) & (PushConfigRow.config_id == config_id)
            )
            if row is None:
                raise PushConfigNotFound(task_id, config_id)
            return without_secrets(from_wire(json.loads(row.body), TaskPushNotificationConfig))

        return await self._db.run(read)

    async def list_push_configs(
        self, caller: Identity, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        def read() -> list[TaskPushNotificationConfig]:
            self._owned(caller, task_id)
            rows = (
                PushConfigRow.select()
                .where(PushConfigRow.task == task_id)
                .order_by(PushConfigRow.seq)
            )
            return [
                without_secrets(from_wire(json.loads(row.body), TaskPushNotificationConfig))
                for row in rows
            ]

        return await self._db.run(read)

    async def delete_push_config(self, caller: Identity, task_id: str, config_id: str) -> None:
        """Idempotent; queued deliveries to that config are dropped, so nothing more is sent."""

        def delete() -> None:
            with self._db.write():
                self._owned(caller, task_id)
                PushConfigRow.delete().where(
                    (PushConfigRow.task == task_id) & (PushConfigRow.config_id == config_id)
                ).execute()
                PushOutbox.update(state="dropped").where(
                    (PushOutbox.task_id == task_id)
                    & (PushOutbox.config_id == config_id)
                    & (PushOutbox.state == "pending")
                ).execute()

        await self._db.run(delete)
