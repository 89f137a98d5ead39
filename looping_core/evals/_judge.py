"""The judge: a model that grades an answer by a case's rubric. Core adds no words: the judge
reads the dataset's `system` text and its `prompt` with `{rubric}`, `{input}` and `{answer}`
filled in, and the answer passes when its reply matches the dataset's `passes`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from looping_core.agent import ChatModel, ModelError, ModelRequest, respond_with_fallback
from looping_core.agent.internal import builtin_model_providers, chat_models
from looping_core.config import Config, TenantModelConfig
from looping_core.content import TextBlock, UserMessage
from looping_core.evals._checks import CheckResult, shown
from looping_core.evals._dataset import DatasetError, Judge

__all__ = ["Grader", "judge_models"]


class Grader:
    """Grades answers with `models` (the first, then its fallbacks) as `judge` says."""

    def __init__(self, judge: Judge, models: Sequence[ChatModel]) -> None:
        self._judge = judge
        self._models = tuple(models)
        self._passes = re.compile(judge.passes)

    async def grade(self, rubric: str, asked: str, answer: str) -> CheckResult:
        prompt = (
            self._judge.prompt.replace("{rubric}", rubric)
            .replace("{input}", asked)
            .replace("{answer}", answer)
        )
        request = ModelRequest((UserMessage((TextBlock(prompt),)),), system=self._judge.system)
        try:
            response = await respond_with_fallback(self._models, request)
        except ModelError as exc:
            return CheckResult("rubric", False, shown(rubric), f"the judge failed: {exc}")
        said = "".join(b.text for b in response.message.content if isinstance(b, TextBlock))
        passed = self._passes.search(said) is not None
        return CheckResult("rubric", passed, shown(rubric), shown(said.strip()))

    async def aclose(self) -> None:
        for model in self._models:
            await model.aclose()


def judge_models(judge: Judge, config: Config, environ: Mapping[str, str]) -> list[ChatModel]:
    """The judge's models: a tenant's of `config`, or its own choice (built-in providers)."""
    choice: TenantModelConfig | None = judge.model
    if judge.tenant is not None:
        tenant = config.tenants.get(judge.tenant)
        choice = tenant.model if tenant is not None else None
        if choice is None:
            problem = f"{config.source} gives tenant {judge.tenant!r} no model @ $.judge.tenant"
            raise DatasetError("the judge", [problem])
    assert choice is not None  # the loader asks for one of the two
    problems: list[str] = []
    providers = builtin_model_providers()
    models = chat_models("judge", choice, providers, environ, problems, path="$.judge.model")
    if problems:
        raise DatasetError("the judge", problems)
    return list(models)
