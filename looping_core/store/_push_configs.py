"""Push configs: the caller's, per task. Deleting one drops its queued pushes, so nothing more is
sent there."""

from __future__ import annotations

import json
import uuid

import attrs

from looping_core.a2a import TaskPushNotificationConfig, from_wire
from looping_core.contract import Identity
from looping_core.store._errors import PushConfigNotFound
from looping_core.store._models import PushConfigRow, PushOutbox
from looping_core.store._rows import StoreBase, dump

__all__ = ["PushConfigs"]


class PushConfigs(StoreBase):
    async def put_push_config(
        self, caller: Identity, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        def write() -> TaskPushNotificationConfig:
            with self._db.write():
                self._owned(caller, config.task_id)
                return self._put_push_config(config.task_id, config)

        return await self._db.run(write)

    def _put_push_config(
        self, task_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        stored = attrs.evolve(config, task_id=task_id, id=config.id or str(uuid.uuid4()), tenant="")
        self._sql(
            "INSERT INTO push_configs (task_id, config_id, body) VALUES (?, ?, ?)"
            " ON CONFLICT (task_id, config_id) DO UPDATE SET body = excluded.body",
            (task_id, stored.id, dump(stored)),
        )
        return stored

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
            return from_wire(json.loads(row.body), TaskPushNotificationConfig)

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
            return [from_wire(json.loads(row.body), TaskPushNotificationConfig) for row in rows]

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
