"""The door of `looping_core.agent` for looping-core's server: making a tenant's agent from its
config (importing its class, making its chat models with the built-in and the plugins'
providers). Not part of the app-facing API: it may change with any release, and the API
snapshot leaves it out.
"""

from looping_core.agent._providers import builtin_model_providers, chat_models
from looping_core.agent._seam import load_agent_class

__all__ = ["builtin_model_providers", "chat_models", "load_agent_class"]
