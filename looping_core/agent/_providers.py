"""Turning a tenant's `[tenants.<id>.model]` into chat models, at startup: the provider by name
(the built-in `openai`, or a plugin's), the API key read from its environment variable, the
client made. Every problem of every tenant is reported at once, naming the key and the fix."""

from __future__ import annotations

from collections.abc import Mapping

from looping_core.agent._model import ChatModel
from looping_core.agent._openai import MissingExtra, openai_provider
from looping_core.config import ModelChoice, TenantModelConfig
from looping_core.contract import ModelProvider
from looping_core.errors import ProblemsError, problem_list

__all__ = ["ModelSetupError", "builtin_model_providers", "chat_models"]


class ModelSetupError(ProblemsError):
    """Some tenant's models cannot be made; `problems` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(problem_list("model", self.problems))


def builtin_model_providers() -> dict[str, ModelProvider]:
    """The providers core ships: `openai`."""
    provider = openai_provider()
    return {provider.name: provider}


def chat_models(
    tenant: str,
    config: TenantModelConfig,
    providers: Mapping[str, ModelProvider],
    environ: Mapping[str, str],
    problems: list[str],
    *,
    path: str | None = None,
) -> tuple[ChatModel, ...]:
    """The tenant's model, then its fallbacks, in order; a problem for each that cannot be made
    is added to `problems` (the caller raises `ModelSetupError` with all of them). `path` names
    where the choice was made (`tenants.<id>.model` by default)."""
    path = path or f"tenants.{tenant}.model"
    choices = [
        (path, config),
        *((f"{path}.fallback[{i}]", c) for i, c in enumerate(config.fallback)),
    ]
    models = []
    for where, choice in choices:
        model = _chat_model(where, choice, providers, environ, problems)
        if model is not None:
            models.append(model)
    return tuple(models)


def _chat_model(
    where: str,
    choice: ModelChoice,
    providers: Mapping[str, ModelProvider],
    environ: Mapping[str, str],
    problems: list[str],
) -> ChatModel | None:
    provider = providers.get(choice.provider)
    if provider is None:
        known = ", ".join(sorted(providers)) or "none"
        problems.append(
            f"{where}.provider: no model provider {choice.provider!r} (known: {known}); "
            "enable the plugin that provides it, or fix the name"
        )
        return None
    api_key = ""
    if choice.api_key is not None:
        if not choice.api_key.is_set(environ):
            problems.append(
                f"{where}.api_key: the environment variable {choice.api_key.env} is not set; "
                "export it before starting"
            )
            return None
        api_key = choice.api_key.value(environ)
    options = {
        "base_url": choice.base_url,
        "api_key": api_key,
        "timeout": choice.timeout_seconds,
        "max_retries": choice.max_retries,
        "options": dict(choice.options),
    }
    try:
        model: ChatModel = provider.factory(choice.model, options)
    except MissingExtra as exc:
        problems.append(f"{where}.provider: {exc}")
        return None
    except Exception as exc:
        problems.append(
            f"{where}: the {choice.provider} provider could not make model {choice.model!r} "
            f"({type(exc).__name__}: {exc})"
        )
        return None
    if not (
        callable(getattr(model, "stream", None)) and isinstance(getattr(model, "label", None), str)
    ):
        problems.append(
            f"{where}: the {choice.provider} provider returned {type(model).__name__}, not a chat "
            "model (one with `label` and `stream`); fix the provider's factory"
        )
        return None
    return model
