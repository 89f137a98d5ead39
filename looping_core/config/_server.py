"""`[server]`: where the server listens, the URLs and the address gateways use to reach it,
and the limits of its connections."""

from __future__ import annotations

from urllib.parse import urlsplit

import attrs

__all__ = ["EVENT_LOOPS", "INSPECTION_PATH", "MAX_WORKERS", "ServerConfig", "bracketed"]

MAX_WORKERS = 64
"""More server processes than this is a typo, not a deployment."""
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
"""`[server] event_loop`: uvloop when installed, uvloop required, or plain asyncio."""
INSPECTION_PATH = "/_looping/inspect"
"""Where the inspection endpoint is served (`[server] inspection`), under the base URL."""


def bracketed(host: str) -> str:
    """A host as a URL or an address writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@attrs.frozen
class ServerConfig:
    """`[server]`: where the server listens and the URL gateways use to reach it."""

    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = None
    """The externally visible base URL; defaults to `http://{host}:{port}`."""
    rpc_path: str = "/a2a"
    """Where the JSON-RPC binding is served (the first interface on the cards)."""
    rest_path: str = "/rest"
    """Where the HTTP+JSON binding is served: `{rest_path}/{tenant}/message:send` and the
    rest (the second interface on the cards)."""
    max_body_bytes: int = 1_048_576
    """Requests with a larger body are refused before they are parsed."""
    workers: int = 1
    """Server processes sharing the listening socket and the store (`looping serve`)."""
    node: str | None = None
    """This server's name among the machines sharing one PostgreSQL store (see `node_of`)."""
    access_log: bool = True
    """Log every request at INFO (`aiohttp.access`)."""
    event_loop: str = "auto"
    """`auto` (uvloop when it is installed), `uvloop` (required), or `asyncio`."""
    header_timeout_seconds: float = 30.0
    """A request's headers must have arrived this long after the connection opened, or after
    the first byte of a request on a kept-alive connection; else the connection is closed."""
    body_timeout_seconds: float = 60.0
    """A request's whole body must have arrived this long after its headers (HTTP 408)."""
    max_connections: int = 1000
    """Open connections per server process; more are answered 503 and closed at once."""
    inspection: bool = False
    """Serve the read-only inspection endpoint a development console reads a task through
    (`looping gateway --console`): loopback hosts only, a gateway token on every call."""
    grpc_port: int = 0
    """Serve the gRPC binding on this port too (0: not served; the `grpc` extra)."""
    grpc_address: str | None = None
    """The `host:port` gateways dial for gRPC: the card's GRPC interface and its tokens'
    audience; defaults to the public URL's host and `grpc_port`."""
    grpc_tls_certificate: str | None = None
    """A PEM certificate chain file: serve gRPC over TLS (with `grpc_tls_private_key`);
    without one, over plain HTTP/2 (h2c), like the HTTP edge behind its gateway."""
    grpc_tls_private_key: str | None = None
    """The PEM private key file of `grpc_tls_certificate`."""
    a2a_1_1_draft: bool = False
    """Answer calls that send `A2A-Version: 1.1` with what the A2A 1.1 draft has merged so far
    (task generations, long-polling GetTask, `ifGenerationMatch`); off: as 1.0."""

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def endpoint_url(self) -> str:
        """The JSON-RPC endpoint: what the card advertises and gateway tokens' `aud`."""
        return self.base_url + self.rpc_path

    @property
    def rest_url(self) -> str:
        """The HTTP+JSON interface's URL: the `aud` of tokens for calls to it."""
        return self.base_url + self.rest_path

    @property
    def grpc_listen_address(self) -> str:
        """Where the gRPC binding listens: `host:grpc_port` (an IPv6 host in brackets)."""
        return f"{bracketed(self.host)}:{self.grpc_port}"

    @property
    def grpc_url(self) -> str:
        """The gRPC interface's address (`host:port`): the `aud` of tokens for calls to it."""
        if self.grpc_address:
            return self.grpc_address
        host = urlsplit(self.base_url).hostname or self.host
        return f"{bracketed(host)}:{self.grpc_port}"

    @property
    def inspection_url(self) -> str:
        """The inspection endpoint's URL: the `aud` of tokens for it (`inspection`)."""
        return self.base_url + INSPECTION_PATH
