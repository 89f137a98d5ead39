"""What tests share: agents under test (`agents`), servers in-process (`serving`) and as
processes (`served`, `processes`), a PostgreSQL of their own (`pg_server`), SSE reading (`sse`),
the two bindings (`bindings`), and the edge fixtures (`fixtures`, a pytest plugin the root
conftest loads). Imported as `support.<module>`: `tests/` is on the path (pytest's rootdir
conftest puts it there; served processes get it in `PYTHONPATH`)."""
