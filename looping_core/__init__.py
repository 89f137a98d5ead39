"""looping-core: the foundation every agent behind a Looping gateway must have.

Architecture (one subpackage per concern; importing one never drags in another):

    config      looping.toml -> frozen attrs (strict; every problem reported at once)
    hookspecs   the plugin contract (CONTRACT_VERSION, hook specs, `hookimpl`)
    contract    the frozen types plugins return and receive
    plugins     entry-point discovery, selection, startup validation, registry, PluginHost
    content     the conversation vocabulary: blocks, messages, usage, chunks, strict codec
    a2a         the zero-trust edge: signing key + JWKS, signed cards, gateway-token checks,
                JWKS cache, wire models (ProtoJSON), JSON-RPC method and error tables
    app         create_app(config): the aiohttp application (routes in one place)
    testing     the public test harness and pytest plugin (never imported by runtime code)
    cli         `looping check / plugins list / keys / serve`

A request's path, the invariants and the areas still to come are described in the project's
design notes; this top-level module stays tiny on purpose (no aiohttp, no peewee, no pluggy).
"""

from importlib import metadata as _metadata

__all__ = ["__version__"]

try:
    __version__ = _metadata.version("looping-core")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0.0.0"
