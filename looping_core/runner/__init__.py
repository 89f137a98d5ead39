"""Turn execution. The embedded runner (in-process, bounded concurrency) is the default."""

from looping_core.runner.embedded import EmbeddedRunner

__all__ = ["EmbeddedRunner"]
