"""The agent server: the aiohttp application and the processes that serve it.

- `create_app(config)`: the application (routes, the edge's handlers and A2A methods, the typed
  services built once at startup);
- `serve(config, plugins)`: `looping serve`, one process or a supervisor and its workers;
- `run_worker(config, plugins)`: `looping worker`, a process running the job engine's jobs;
- `listen(app, host, port)`: serve an application through its connection guard (header
  deadlines, a connection cap), as `looping serve` does; tests use it too;
- `telemetry_problems(observability)`: what keeps the configured metrics or traces from
  working (`looping check` reports it).
"""

from looping_core.server._app import (
    LOCAL_NODE,
    build_agents,
    create_app,
    node_of,
    prepare_store,
    tenant_models,
    tenant_plugin_hosts,
)
from looping_core.server._services import SERVICES, Services
from looping_core.server._serving import Listener, ServeError, event_loop_factory, listen, serve
from looping_core.server._telemetry import telemetry_problems
from looping_core.server._worker import run_worker

__all__ = [
    "LOCAL_NODE",
    "SERVICES",
    "Listener",
    "ServeError",
    "Services",
    "build_agents",
    "create_app",
    "event_loop_factory",
    "listen",
    "node_of",
    "prepare_store",
    "run_worker",
    "serve",
    "telemetry_problems",
    "tenant_models",
    "tenant_plugin_hosts",
]
