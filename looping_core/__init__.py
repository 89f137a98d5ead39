"""looping-core: the foundation every agent behind a Looping gateway must have.

Layers, bottom up; each imports only the ones below it (a test walks every import):

    errors, contract, hookspecs   the error family; frozen types shared with plugins (the
                                  caller's `Identity` among them); the plugin contract
    content     the conversation vocabulary: blocks, messages, usage, chunks, strict codec
    config      looping.toml -> frozen attrs (strict; every problem reported at once)
    plugins     entry-point discovery, selection, startup validation, registry, PluginHost
    a2a         the protocol: wire models (ProtoJSON), JSON-RPC envelopes and error table, the
                grammar of what is accepted, keys, signed cards, gateway tokens, JWKS cache,
                push signatures, blocks <-> parts
    store       the database layer, migrations, the task store and the push outbox
    agent       the agent seam (no web, JOSE or database code)
    runner      turns run in-process; the push deliverer
    server      create_app(config), handlers, typed services, connection guard, `looping serve`
    cli         `looping check / plugins / keys / serve / db`
    testing     the public test harness and pytest plugin (never imported by runtime code)

This top-level module stays tiny on purpose (no aiohttp, no peewee, no pluggy).
"""

from importlib import metadata as _metadata

__all__ = ["__version__"]

try:
    __version__ = _metadata.version("looping-core")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0.0.0"
