"""`LoopingConfig`: how a `LoopingAgent`'s loop runs (the app's numbers and words), and what
the deployment overrides of it (`[tenants.<id>.loop]`)."""

from __future__ import annotations

from typing import Any

import attrs

from looping_core.agent._compaction import Compaction
from looping_core.agent._loop import Budget, ControlAction
from looping_core.agent._output import (
    OUTPUT_MODES,
    AnswerSchema,
    AnswerTypeError,
    StructuredAnswer,
)
from looping_core.config import LoopSettings, TenantModelConfig

__all__ = ["LoopingConfig"]


@attrs.frozen
class LoopingConfig:
    """How a `LoopingAgent`'s loop runs. `budget_note` is the app's words for a spent budget;
    `compaction.prompt` its words for a summary. `[tenants.<id>.loop]` overrides the numbers."""

    budget: Budget = attrs.field(factory=Budget)
    budget_note: str = ""
    tool_timeout: float = 60.0
    max_parallel_tools: int = 4
    answer_name: str = "answer"
    """The name of the artifact that carries the final answer."""
    stream_answer: bool = True
    """Stream each response's text into the answer artifact as it arrives (chunks for streams;
    a later response replaces what an earlier one streamed, the final answer replaces all)."""
    actions: tuple[ControlAction, ...] = ()
    """Ways out of the loop the model may take: ask the caller for input, or decline."""
    compaction: Compaction = attrs.field(factory=Compaction)
    context_window: int | None = None
    """The models' context window when `[tenants.<id>.model]` declares none."""
    model: TenantModelConfig | None = None
    """The agent's own model and fallbacks, used when the config has no `[tenants.<id>.model]`
    (which, when present, replaces it whole: endpoints and keys are the deployment's)."""
    output_mode: str = "tool"
    """How the model is asked for a structured answer (`output_type`): `tool` or `native`."""
    output_retries: int = 2
    """Wrong structured answers the model may correct before the turn fails."""
    answer_tool: str = "final_answer"
    """The name of the tool a structured answer is given with (`output_mode = "tool"`)."""

    def structured_answer(self, schema: AnswerSchema) -> StructuredAnswer:
        """How an answer of `schema` is asked for under these settings; `AnswerTypeError` when
        `output_mode` is neither of the two."""
        if self.output_mode not in OUTPUT_MODES:
            raise AnswerTypeError(
                f'output_mode must be "tool" or "native", not {self.output_mode!r}'
            )
        retries = max(0, self.output_retries)
        return StructuredAnswer(schema, self.output_mode, self.answer_tool, retries)

    def overridden(self, settings: LoopSettings) -> LoopingConfig:
        """This config with what the deployment set in `[tenants.<id>.loop]`."""

        def pick(name: str, current: Any) -> Any:
            value = getattr(settings, name)
            return current if value is None else value

        budget = Budget(
            max_rounds=pick("max_rounds", self.budget.max_rounds),
            max_tokens=pick("max_tokens", self.budget.max_tokens),
            max_seconds=pick("max_seconds", self.budget.max_seconds),
            max_cost=pick("max_cost", self.budget.max_cost),
        )
        compaction = attrs.evolve(
            self.compaction,
            compact_at=pick("compact_at", self.compaction.compact_at),
            keep_last=pick("keep_last", self.compaction.keep_last),
            summary_max_tokens=pick("summary_max_tokens", self.compaction.summary_max_tokens),
        )
        return attrs.evolve(
            self,
            budget=budget,
            compaction=compaction,
            tool_timeout=pick("tool_timeout_seconds", self.tool_timeout),
            max_parallel_tools=pick("max_parallel_tools", self.max_parallel_tools),
            output_mode=pick("output_mode", self.output_mode),
            output_retries=pick("output_retries", self.output_retries),
        )
