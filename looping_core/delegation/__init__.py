"""Delegation: an agent splits a turn into subtasks, runs them on isolated subagents in waves,
and folds their results back, round after round. Opt-in: an agent that never delegates imports
none of it.

- `RoundAgent` (a `LoopingAgent`) adds the `delegate` tool, built from the tenant's plugins'
  subtask types, and takes every word from the app's `RoundPolicy`;
- plans are checked as a whole (`parse_plan`: unknown types, params that do not structure,
  missing dependencies, repeated ids, cycles), stored as durable subtasks, and run by
  `run_waves`: each wave every subtask whose dependencies are done, at most `max_parallel` at
  once, each on its own session with only its recipe's tools, resumable by fingerprint;
- workspaces: `GuardedWorkspace` enforces core's caps over any backing; `MemoryBacking` is the
  default.
"""

from looping_core.delegation._plan import PlannedSubtask, parse_plan, plan_schema
from looping_core.delegation._round import DELEGATE_TOOL, RoundAgent, RoundPolicy
from looping_core.delegation._schema import params_schema
from looping_core.delegation._waves import (
    SubagentSetup,
    WaveReport,
    fingerprint_of,
    run_waves,
    waves_as_run,
)
from looping_core.delegation._workspace import (
    GuardedWorkspace,
    MemoryBacking,
    WorkspaceError,
    WorkspaceLimits,
    check_path,
    memory_backing,
)

__all__ = [
    "DELEGATE_TOOL",
    "GuardedWorkspace",
    "MemoryBacking",
    "PlannedSubtask",
    "RoundAgent",
    "RoundPolicy",
    "SubagentSetup",
    "WaveReport",
    "WorkspaceError",
    "WorkspaceLimits",
    "check_path",
    "fingerprint_of",
    "memory_backing",
    "params_schema",
    "parse_plan",
    "plan_schema",
    "run_waves",
    "waves_as_run",
]
