"""The agent server: the aiohttp application and the processes that serve it.

- `create_app(config)`: the application (routes, the edge's handlers and A2A methods, the typed
  services built once at startup); every startup problem is found before it returns, several
  at once as `StartupProblems`;
- `serve(config, plugins)`: `looping serve`, one process or a supervisor and its workers;
- `run_worker(config, plugins)`: `looping worker`, a process running the job engine's jobs;
- `listen(app, host, port)`: serve an application through its connection guard (header
  deadlines, a connection cap), as `looping serve` does; tests use it too;

The rest (the typed services under `SERVICES`, the startup steps `looping check` shares, what
keeps the configured metrics or traces from working) is for looping-core's own CLI and test
harness: `looping_core.server.internal`.
"""

from looping_core.server.internal import (
    Listener,
    ServeError,
    StartupProblems,
    create_app,
    listen,
    run_worker,
    serve,
)

__all__ = [
    "Listener",
    "ServeError",
    "StartupProblems",
    "create_app",
    "listen",
    "run_worker",
    "serve",
]
