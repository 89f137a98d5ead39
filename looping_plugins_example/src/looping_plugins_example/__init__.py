"""Example plugins for looping-core, shipped as their own distribution.

- `example-notes` (`notes.py`): the `notes` tool family, the `summarize-notes` subtask type, and
  a plugin-owned store (table `example_notes`) with versioned, idempotent `ensure_tables`.
- `example-gates` (`gates.py`): a turn gate that mutes turns starting with a prefix, and a
  `messages_displaced` listener that logs what compaction removed.
"""
