"""Push configs' sealed secrets across keys: the startup check that every sealed value can be
opened, and sealing again with the current key (rows sealed with a previous key, and rows an
older release stored in clear). Store-thread code, run before a server starts serving and by
`looping db rotate-secrets`."""

from __future__ import annotations

import json

import attrs

from looping_core.a2a import TaskPushNotificationConfig, from_wire
from looping_core.store._db import Database
from looping_core.store._push_configs import opened_settings, sealed_config
from looping_core.store._rows import dump
from looping_core.store._secrets import PushSecrets, SecretsUnreadable

__all__ = ["check_sealed_secrets", "seal_again"]

_BATCH = 500


def check_sealed_secrets(database: Database, secrets: PushSecrets) -> None:
    """`SecretsUnreadable` naming the fix when push configs are sealed with a key this server
    does not have: it would fail every push to them, so it refuses to start instead."""
    rows = database.execute(
        "SELECT DISTINCT secrets_key FROM push_configs WHERE secrets_key IS NOT NULL"
    ).fetchall()
    missing = sorted({key for (key,) in rows} - secrets.key_ids)
    if missing:
        raise SecretsUnreadable(
            f"push configs in the store are sealed with key {', '.join(missing)}, which this "
            "server does not have: set [store] secrets_key to the key they were sealed with "
            "(the signing key's, when none was set), or name it in [store] "
            "previous_secrets_keys and run `looping db rotate-secrets`"
        )


def seal_again(database: Database, secrets: PushSecrets) -> int:
    """Seal with the current key every push config sealed with another, or holding secrets in
    clear; how many were sealed again. In batches, each its own transaction, so values sealed
    with an old key stay readable until their row is rewritten. First `check_sealed_secrets`:
    nothing is rewritten while some value cannot be opened."""
    check_sealed_secrets(database, secrets)
    done = 0
    last = 0
    while True:
        rows = database.execute(
            "SELECT seq, task_id, config_id, body FROM push_configs WHERE seq > ?"
            " AND ((secrets_key IS NOT NULL AND secrets_key <> ?) OR (secrets_key IS NULL"
            " AND (body LIKE ? OR body LIKE ?))) ORDER BY seq LIMIT ?",
            (last, secrets.current_id, '%"token"%', '%"credentials"%', _BATCH),
        ).fetchall()
        if not rows:
            return done
        with database.write():
            for seq, task_id, config_id, body in rows:
                opened = opened_settings(secrets, task_id, config_id, json.loads(body))
                config = from_wire(opened, TaskPushNotificationConfig)
                # Sealed for the row's own ids: the ones delivery opens it with.
                config = attrs.evolve(config, task_id=task_id, id=config_id)
                sealed, key_id = sealed_config(secrets, config)
                database.execute(
                    "UPDATE push_configs SET body = ?, secrets_key = ? WHERE seq = ?",
                    (dump(sealed), key_id, seq),
                )
                done += 1
        last = rows[-1][0]
