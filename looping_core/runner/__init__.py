"""Turn execution and push delivery. The embedded runner (in-process, bounded concurrency) is the
default; the deliverer sends the outbox's pushes."""

from looping_core.runner._delivery import PushDeliverer
from looping_core.runner._embedded import EmbeddedRunner

__all__ = ["EmbeddedRunner", "PushDeliverer"]
