"""What every listener of a server shares (the HTTP edge, the gRPC binding, metrics): how long
an idle connection stays, how long a stopping server waits for its calls, whether a port is
free."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

from looping_core.config import Config

__all__ = [
    "KEEPALIVE_TIMEOUT_SECONDS",
    "SHUTDOWN_TIMEOUT_SECONDS",
    "grpc_problems",
    "listen_problems",
    "port_problem",
]

SHUTDOWN_TIMEOUT_SECONDS = 60.0
"""How long a stopping server waits for the requests in flight."""
KEEPALIVE_TIMEOUT_SECONDS = 75.0
"""How long an idle kept-alive connection stays open."""


def port_problem(host: str, port: int) -> str | None:
    """Why nothing can listen on `host:port`, or `None`. Binds without SO_REUSEPORT once: fails
    if anything (another `looping serve` included) already listens there, so workers never
    split a port with a stranger."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        socket.create_server((host, port), family=family).close()
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def listen_problems(config: Config) -> list[str]:
    """Every port the server would listen on that something else holds (`looping check`)."""
    server, observability = config.server, config.observability
    ports = [
        ("server.port", server.host, server.port),
        ("server.grpc_port", server.host, server.grpc_port),
        ("observability.metrics_port", observability.metrics_host, observability.metrics_port),
    ]
    return [
        f"{problem} @ $.{key}"
        for key, host, port in ports
        if port and (problem := port_problem(host, port)) is not None
    ]


def grpc_problems(config: Config) -> list[str]:
    """What the gRPC binding needs before it can listen: its packages (the `grpc` extra) and,
    for TLS, readable PEM files."""
    server = config.server
    if not server.grpc_port:
        return []
    missing = [
        package
        for package, module in (("grpcio", "grpc"), ("grpcio-status", "grpc_status"))
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        return [
            f"grpc_port needs {' and '.join(missing)}; install the grpc extra: "
            "pip install 'looping-core[grpc]' @ $.server.grpc_port"
        ]
    problems = []
    for key in ("grpc_tls_certificate", "grpc_tls_private_key"):
        path = getattr(server, key)
        if path is None:
            continue
        try:
            pem = Path(path).read_bytes()
        except OSError as exc:
            problems.append(f"{key}: cannot read {path}: {exc.strerror or exc} @ $.server.{key}")
            continue
        if b"-----BEGIN " not in pem:
            problems.append(f"{key}: {path} is not a PEM file @ $.server.{key}")
    return problems
