"""The local gateway's state folder: its private key, made once, readable by its owner only."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from looping_core.a2a import SigningKey, generate_signing_key
from looping_core.errors import LoopingError

__all__ = ["STATE_ENV_VAR", "KeyFileExposed", "default_state_folder", "gateway_key"]

STATE_ENV_VAR = "LOOPING_GATEWAY_STATE"
KEY_FILE = "gateway-key.json"


def default_state_folder(environ: Mapping[str, str] | None = None) -> Path:
    """`$LOOPING_GATEWAY_STATE`, else `$XDG_STATE_HOME/looping/gateway`, else
    `~/.local/state/looping/gateway`."""
    env = os.environ if environ is None else environ
    if env.get(STATE_ENV_VAR):
        return Path(env[STATE_ENV_VAR])
    base = (
        Path(env["XDG_STATE_HOME"]) if env.get("XDG_STATE_HOME") else Path.home() / ".local/state"
    )
    return base / "looping" / "gateway"


class KeyFileExposed(LoopingError):
    """The gateway's key file can be read by others than its owner."""


def gateway_key(folder: Path) -> dict[str, Any]:
    """The gateway's private JWK from `folder`, made (mode 0600) on first use.

    A key file that others can read or write is refused, not used with a warning: whoever reads
    it mints tokens that every agent trusting this gateway accepts, and a warning scrolls by
    while the key goes on being used."""
    path = folder / KEY_FILE
    if path.exists():
        mode = path.stat().st_mode
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeyFileExposed(
                f"{path}: the gateway's private key is open to other users (mode "
                f"{stat.filemode(mode)}); anyone who reads it can mint tokens your agents "
                f"accept. Make it the owner's only: chmod 600 {path}"
            )
        jwk: dict[str, Any] = json.loads(path.read_text())
        SigningKey.from_jwk(jwk)  # a damaged file is an error here, not at the first token
        return jwk
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    jwk = generate_signing_key("local-gateway")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(jwk, file)
    return jwk
