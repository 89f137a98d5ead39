"""The door of `looping_core.server` for looping-core's CLI, gateway and test harness: what an app
embedding the server uses, plus the startup steps and the services the handlers share. Not
part of the app-facing API: it may change with any release, and the API snapshot leaves it out.
"""

from looping_core.server._app import create_app, prepare_store
from looping_core.server._call_path import CallContext, Caller, authenticate, check_version
from looping_core.server._inspect import handle_inspect, is_loopback_client
from looping_core.server._listening import listen_problems
from looping_core.server._services import SERVICES, Services
from looping_core.server._serving import Listener, ServeError, event_loop_factory, listen, serve
from looping_core.server._startup import (
    LOCAL_NODE,
    Startup,
    StartupProblems,
    assemble,
    check_startup,
    node_of,
    push_secrets,
    tenant_models,
)
from looping_core.server._worker import run_worker

__all__ = [
    "LOCAL_NODE",
    "SERVICES",
    "CallContext",
    "Caller",
    "Listener",
    "ServeError",
    "Services",
    "Startup",
    "StartupProblems",
    "assemble",
    "authenticate",
    "check_startup",
    "check_version",
    "create_app",
    "event_loop_factory",
    "handle_inspect",
    "is_loopback_client",
    "listen",
    "listen_problems",
    "node_of",
    "prepare_store",
    "push_secrets",
    "run_worker",
    "serve",
    "tenant_models",
]
