"""Turn execution and push delivery.

- `Runner`: what the edge asks of a runner (start, wait until settled, cancel, the canceled
  message), met by `LocalRunner` (turns run in the process that accepted them: the embedded
  default) and `EngineRunner` (turns are the job engine's jobs, run by any worker);
- `TurnDriver`: one task's turns from SUBMITTED to their end, which both runners (and the job
  engine's turn job) use;
- `PushDeliverer`: sends the outbox's pushes (its own loop, or one job at a time);
- `run_retention`, `keep_pruning`: `[retention]`'s pass, and its timer in the embedded mode;
- `JobEngine`, `EngineHooks`: turns and pushes as procrastinate jobs on PostgreSQL (imported on
  first use: procrastinate comes with the `postgres` extra); `apply_engine_schema` and
  `engine_schema` manage its tables, `queue_orphans` gives rows from before it their jobs.

Nothing here is for apps (the server builds the runner it needs); looping-core's own server and
CLI reach these names through `looping_core.runner.internal`.
"""

__all__: list[str] = []
