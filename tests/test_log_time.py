"""The text log format writes each record's time as `logging` does, though it formats each
second once."""

from __future__ import annotations

import logging

from looping_core._logs import _TEXT_FORMAT, _TextFormatter


def record_at(created: float) -> logging.LogRecord:
    record = logging.LogRecord("looping_core", logging.INFO, __file__, 1, "m", None, None)
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


def test_the_time_of_each_record_is_the_one_logging_writes() -> None:
    ours, standard = _TextFormatter(_TEXT_FORMAT), logging.Formatter(_TEXT_FORMAT)
    # The same second twice (the kept text), the next one, one before it, and a minute later.
    for created in (1_780_000_000.125, 1_780_000_000.999, 1_780_000_001.0, 1_779_999_999.5,
                    1_780_000_061.042):  # fmt: skip
        record = record_at(created)
        assert ours.formatTime(record) == standard.formatTime(record)
    record = record_at(1_780_000_000.5)
    assert ours.formatTime(record, "%H:%M") == standard.formatTime(record, "%H:%M")
