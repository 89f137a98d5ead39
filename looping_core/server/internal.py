"""The door of `looping_core.server` for looping-core's CLI, gateway and test harness: what an app
embedding the server uses, plus the startup steps and the services the handlers share. Not
part of the app-facing API: it may change with any release, and the API snapshot leaves it out.
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
