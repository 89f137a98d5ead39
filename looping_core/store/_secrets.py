"""Push configs' secrets sealed at rest: a config's `token` and `authentication.credentials`
are stored encrypted (AES-256-GCM), each bound to its task, config and field, and opened only
to deliver a push.

    lps1.<key id>.<base64url(nonce || ciphertext)>

The key is derived (HKDF-SHA256) from key material the server is given: by default the agent's
own signing key, so nothing more needs setting up; or a dedicated secret. The key id (eight hex
digits of the key's hash) says which key sealed a value, so values sealed with a previous key
stay readable while `rotate` seals them again with the current one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from looping_core.store._unreachable import StoreError

__all__ = ["SEALED_PREFIX", "PushSecrets", "SecretsUnreadable"]

SEALED_PREFIX = "lps1."
_INFO = b"looping-core push secrets v1"
_NONCE_BYTES = 12


class SecretsUnreadable(StoreError):
    """A sealed value whose key this server does not have, or that does not open with it."""


class PushSecrets:
    """Seals and opens push secrets with `current`; opens with `previous` keys too."""

    def __init__(self, current: bytes, previous: Sequence[bytes] = ()) -> None:
        self._current = _derived(current)
        self.current_id = _key_id(self._current)
        self._keys = {self.current_id: AESGCM(self._current)}
        for material in previous:
            key = _derived(material)
            self._keys.setdefault(_key_id(key), AESGCM(key))

    @property
    def key_ids(self) -> frozenset[str]:
        """The ids of every key this server can open values with."""
        return frozenset(self._keys)

    def seal(self, value: str, where: str) -> str:
        """`value` sealed for `where` (task, config and field); "" stays "" (nothing to hide)."""
        if not value:
            return value
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._keys[self.current_id].encrypt(nonce, value.encode(), where.encode())
        text = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f"{SEALED_PREFIX}{self.current_id}.{text}"

    def open(self, value: str, where: str) -> str:
        """The value `seal` was given; a value never sealed (an older row) comes back as is."""
        if not value.startswith(SEALED_PREFIX):
            return value
        key_id, _, text = value[len(SEALED_PREFIX) :].partition(".")
        aead = self._keys.get(key_id)
        if aead is None:
            raise SecretsUnreadable(
                f"a push secret was sealed with key {key_id!r}, which this server does not have"
            )
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            return aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], where.encode()).decode()
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretsUnreadable(
                f"a push secret sealed with key {key_id!r} does not open (changed or moved)"
            ) from None

    @staticmethod
    def sealed_with(value: str) -> str | None:
        """The id of the key that sealed `value` (`None`: not sealed)."""
        if not value.startswith(SEALED_PREFIX):
            return None
        return value[len(SEALED_PREFIX) :].partition(".")[0]


def _derived(material: bytes) -> bytes:
    if len(material) < 32:
        raise ValueError("push secrets' key material must be at least 32 bytes")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(material)


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"key id:" + key).hexdigest()[:8]
