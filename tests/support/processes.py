"""`looping` commands as child processes: started in a session of their own, waited for by a URL
that answers, stopped with a signal, their output in a log file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def start_looping(
    *args: str,
    env: dict[str, str],
    log: Path,
    cwd: Path | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """`looping ARGS...` with `env` added to this environment, its output appended to `log`."""
    script = str(Path(sys.executable).with_name("looping"))
    with log.open("ab") as output:
        return subprocess.Popen(
            [script, *args], env={**os.environ, **env}, stdout=output, stderr=output,
            start_new_session=True, cwd=cwd, preexec_fn=preexec,  # noqa: PLW1509 - it only sets a signal disposition
        )  # fmt: skip


def wait_for_url(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until `url` answers (any status); the log, as the failure, if the process ends first."""
    for _ in range(300):
        if process.poll() is not None:
            raise AssertionError(log.read_text())
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{url} never answered:\n{log.read_text()}")


def stop(process: subprocess.Popen[bytes], signum: int = signal.SIGINT) -> int:
    """Send `signum` and wait for the exit; its code."""
    if process.poll() is None:
        process.send_signal(signum)
    return process.wait(timeout=30)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status.lower()
