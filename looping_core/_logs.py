"""Logs you can query: what a log line is about (request, tenant, caller, task), and the two
formats.

The edge and the runner put what they know in context variables as they learn it (`bind`); a
filter copies them onto every record logged in that context, so each line says which request,
tenant, caller and task it belongs to without every call site passing them. The caller is its
subject, never a token. `configure` installs the format: `text` (one readable line) or `json`
(one JSON object per line, encoded by the standard library's `json`).

What a client sent can reach a line (a path, a value of a refused request): every record is
made safe before it is formatted (`_Safe`). Control characters (CR and LF included) in the
message, its arguments and its fields are escaped, so no value can forge a line; a value longer
than `MAX_VALUE` characters is cut, and says how long it was, so none can make the log grow by
its size. A traceback is the server's own and is left as it is.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["FIELDS", "MAX_VALUE", "JsonFormatter", "bind", "bound", "configure", "current", "safe"]

FIELDS = ("request_id", "tenant", "subject", "task_id")
"""What a line can say it is about, beside its message."""

_CONTEXT: dict[str, contextvars.ContextVar[str | None]] = {
    name: contextvars.ContextVar(f"looping_log_{name}", default=None) for name in FIELDS
}
_TEXT_FORMAT = "%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s%(context)s"
MAX_VALUE = 200
"""The most characters of one value (an argument, a field) a log line carries."""
MAX_MESSAGE = 4000
"""The most characters of one message, its arguments in it."""
_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))} | {
    0x2028: "\\u2028",
    0x2029: "\\u2029",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}
"""Control characters (C0, DEL, C1) and Unicode's line and paragraph separators, escaped."""


def safe(value: str, limit: int = MAX_VALUE) -> str:
    """`value` fit for one log line: control characters escaped, cut at `limit` characters
    (saying how many there were)."""
    if len(value) <= limit and value.isprintable():
        return value  # the usual case: no control character, no separator but the space
    cut = value if len(value) <= limit else value[:limit]
    escaped = cut.translate(_ESCAPES)
    if len(value) > limit:
        escaped += f"...[{len(value)} chars]"
    return escaped


def bind(**values: str | None) -> None:
    """Say, for the rest of this context (a request, a turn), what its log lines are about."""
    for name, value in values.items():
        _CONTEXT[name].set(value)


def current() -> dict[str, str]:
    """What this context's lines are about so far (the fields bound, without the unset ones)."""
    values = {name: variable.get() for name, variable in _CONTEXT.items()}
    return {name: value for name, value in values.items() if value}


@contextmanager
def bound(**values: str | None) -> Iterator[None]:
    """`bind` for a block only."""
    tokens = [(_CONTEXT[name], _CONTEXT[name].set(value)) for name, value in values.items()]
    try:
        yield
    finally:
        for variable, token in reversed(tokens):
            variable.reset(token)


_PID = [os.getpid()]
"""This process's id, kept: `logging` would ask the kernel for it on every record (a system
call each; `configure` turns that off), and a server logs a line per request."""
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


class _Context(logging.Filter):
    """Copies the bound fields onto each record (and a ` [k=v ...]` suffix for text lines), and
    the process id."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.process is None:
            record.process = _PID[0]
        pairs = []
        for name, variable in _CONTEXT.items():
            value = getattr(record, name, None) or variable.get()
            if value:
                value = safe(str(value))  # made safe here, once: `_Safe` leaves the fields be
                pairs.append(f"{name}={value}")
            setattr(record, name, value)
        record.context = f" [{' '.join(pairs)}]" if pairs else ""
        return True


class _Safe(logging.Filter):
    """Makes each record safe to write (see the module's docstring): the message is formatted
    here with its arguments made safe, then escaped and capped as a whole; string fields too."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_looping_safe", False):
            return True  # another handler's filter did it already
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.args = tuple(_safe_argument(arg) for arg in args)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # arguments that do not fit the format
            message = f"{record.msg!s} {record.args!r}"
        record.msg, record.args = safe(message, MAX_MESSAGE), None
        attributes = vars(record)
        for name in attributes.keys() - _MADE_SAFE:  # a field passed as `extra`
            value = attributes[name]
            if isinstance(value, str) and not name.startswith("_"):
                attributes[name] = safe(value)
        record._looping_safe = True
        return True


_OWN = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"context"}
"""A record's own attributes (the logger's name, the level, where it was logged...) and the
context suffix, which `_Context` made safe: only fields are escaped one by one."""
_MADE_SAFE = _OWN | frozenset(FIELDS)
"""What `_Safe` leaves alone: the record's own attributes, and the bound fields `_Context`
made safe (it runs first on the handler)."""


def _safe_argument(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value  # `%d`, `%.2f` need the number
    if isinstance(value, dict):
        return value  # a `%(name)s` mapping: left to the message's escaping and cap
    return safe(str(value))


class _TextFormatter(logging.Formatter):
    """The text format, its time formatted once a second: `logging` formats it anew for every
    record (`time.localtime` and `strftime`), and a server logs a line per turn."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second, text = self._second
        if int(record.created) != second:
            second = int(record.created)
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (second, text)
        return f"{text},{int(record.msecs):03d}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the bound fields, and any
    `extra` a call passed (numbers stay numbers)."""

    _STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
        "message", "asctime", "context", *FIELDS,
    }  # fmt: skip

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value:
                document[name] = value
        for name, value in vars(record).items():
            if name not in self._STANDARD and not name.startswith("_"):
                document[name] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, ensure_ascii=False)


def configure(level: str = "info", log_format: str = "text") -> None:
    """Log to stderr at `level` (`debug`, `info`, `warning`, `error`) as `text` or `json`."""
    handler = logging.StreamHandler()
    handler.addFilter(_MalformedHttp())
    handler.addFilter(_EngineOutage())
    handler.addFilter(_Context())
    handler.addFilter(_Safe())
    handler.setFormatter(JsonFormatter() if log_format == "json" else _TextFormatter(_TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # What neither format shows, `logging` is told not to find out for every record (the
    # optimizations its HOWTO lists): the calling frame (a walk up the stack), the thread, the
    # multiprocessing process name; and the process id, which `_Context` gives from `_PID`.
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    logging.logProcesses = False
    # The job engine logs every job it starts and ends; the runner's own line per turn says
    # more. Its warnings and errors still show, and everything at debug.
    engine = logging.getLogger("procrastinate")
    engine.setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
    # The driver's pool logs each failed reconnection during a store outage; the store says
    # once that it is unavailable, and once that it is back.
    pool = logging.getLogger("psycopg.pool")
    pool.setLevel(logging.DEBUG if level.lower() == "debug" else logging.ERROR)


class _MalformedHttp(logging.Filter):
    """A client's malformed HTTP (a request line or header too long, no method) is the
    client's mistake: aiohttp logs it as an ERROR with its traceback, while the access log
    already has the request's one line (400). Dropped; at debug, one line without the
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if record.name != "aiohttp.server" or error is None:
            return True
        if not any(cls.__name__ == "HttpProcessingError" for cls in type(error).__mro__):
            return True
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            return False
        problem = " ".join(str(error).split()) or type(error).__name__
        record.msg, record.args = f"{record.getMessage()}: {type(error).__name__}: {problem}", None
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


class _EngineOutage(logging.Filter):
    """The job engine's lines about losing the store (its listener or heartbeat failing, "stopping
    worker", a job whose end it could not record) as one WARNING line without a traceback: the
    store logs the outage itself, the job worker is started again and the sweep hands such a
    job back."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        engine = record.name.startswith("procrastinate") or record.name == "asyncio"
        if error is not None and engine and _lost_store(error):
            text = " ".join(record.getMessage().split())  # one line
            record.msg, record.args = f"{text} (the store is unavailable)", None
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _lost_store(error: BaseException) -> bool:
    """The engine's connector error or psycopg's connection error, or one raised from them."""
    seen: BaseException | None = error
    for _ in range(4):
        if seen is None:
            return False
        names = {cls.__name__ for cls in type(seen).__mro__}
        if names & {"ConnectorException", "OperationalError", "InterfaceError"}:
            return True
        seen = seen.__cause__ or seen.__context__
    return False
