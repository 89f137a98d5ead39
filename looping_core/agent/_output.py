"""Structured answers: an agent that answers a program, in a schema.

An agent declares its answer's type: an attrs class, a dataclass, a `TypedDict` (the schema
typed tools' parameters get, `looping_core.tools.schema_of`) or a JSON Schema of an object. The
model is asked for it one of two ways (`[tenants.<id>.loop] output_mode`):

- `tool` (the default, any tool-calling model): a tool whose input schema is the answer's; the
  model answers by calling it;
- `native`: the provider's own structured output (`response_format` with the JSON Schema on the
  `openai` provider), the answer being the response's text.

An answer is checked against the schema (draft 2020-12, with the validator that never fetches)
and then structured into the type; one that does not fit goes back to the model as an error
result it can correct (tool mode), or as the problem's text (native mode), at most `retries`
times. Core adds no words: the answer tool's description is the type's docstring (or the
schema's `description`), and the problems are terse facts like a tool's argument errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from looping_core.agent._model import ModelResponse, OutputRequest, ToolSpec
from looping_core.agent._tool_calls import error_result
from looping_core.content import (
    AssistantMessage,
    Message,
    RefusalBlock,
    TextBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
)
from looping_core.contract import ToolError
from looping_core.tools import (
    SchemaUnusable,
    ToolDefinitionError,
    argument_problems,
    schema_of,
    schema_problem,
    structurer_of,
)

__all__ = [
    "NOT_RUN_ANSWERED",
    "OUTPUT_MODES",
    "AnswerAttempt",
    "AnswerSchema",
    "AnswerTypeError",
    "StructuredAnswer",
    "answer_attempt",
    "attempt_messages",
    "given_answer",
    "json_of_text",
    "judged_answer_call",
    "pending_answer",
]

OUTPUT_MODES = ("tool", "native")
"""How a model is asked for a structured answer: a final-answer tool, or its native output."""

_NAME = re.compile(r"[^A-Za-z0-9_-]")


class AnswerTypeError(ValueError):
    """An answer type that cannot be used: the message says what and how to fix it."""


def _as_is(value: Any) -> Any:
    return value


@attrs.frozen
class AnswerSchema:
    """The type of an agent's answer: its JSON Schema (of an object), a name and description
    for the model, and how a value that fits the schema becomes the app's type."""

    name: str
    schema: Mapping[str, Any]
    description: str = ""
    structure: Callable[[Any], Any] = attrs.field(default=_as_is, eq=False, repr=False)

    @classmethod
    def of(cls, answer_type: Any) -> AnswerSchema:
        """The schema of `answer_type`: an attrs class, a dataclass or a `TypedDict` (answers
        are structured into it), or a JSON Schema as a mapping (answers stay JSON values).
        `AnswerTypeError` when it is none of these, or not an object."""
        if isinstance(answer_type, Mapping):
            schema = dict(answer_type)
            problem = schema_problem(schema)
            if problem is not None:
                raise AnswerTypeError(f"the answer's JSON Schema cannot be used: {problem}")
            name = str(schema.get("title") or "answer")
            structure: Callable[[Any], Any] = _as_is
        else:
            try:
                schema = schema_of(answer_type)
                structure = structurer_of(answer_type)
            except ToolDefinitionError as exc:
                raise AnswerTypeError(f"the answer's type has no schema: {exc}") from None
            name = getattr(answer_type, "__name__", "") or "answer"
        if schema.get("type") != "object":
            raise AnswerTypeError(
                "an answer must be a JSON object: give an attrs class, a dataclass, a "
                'TypedDict or a JSON Schema whose type is "object"'
            )
        description = schema.get("description")
        return cls(
            name=_NAME.sub("_", name)[:64] or "answer",
            schema=schema,
            description=description if isinstance(description, str) else "",
            structure=structure,
        )

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` as an answer, in the terse form of a tool's argument
        errors (`None`: it fits, and structures)."""
        if not isinstance(value, dict):
            return "invalid answer: it is not a JSON object"
        try:
            problem = argument_problems(self.schema, value, what="answer")
        except SchemaUnusable as exc:  # checked when the schema was made: not expected
            return f"the answer could not be checked ({exc})"
        if problem is not None:
            return problem
        try:
            self.structure(value)
        except ToolError as exc:
            return f"invalid answer: {exc.message}"
        return None


@attrs.frozen
class StructuredAnswer:
    """How the loop asks for a structured answer: the schema, the mode (`tool` or `native`),
    the answer tool's name (tool mode), and how many wrong answers the model may correct."""

    schema: AnswerSchema
    mode: str = attrs.field(default="tool", validator=attrs.validators.in_(OUTPUT_MODES))
    tool_name: str = "final_answer"
    retries: int = attrs.field(default=2, validator=attrs.validators.ge(0))

    @property
    def as_tool(self) -> bool:
        return self.mode == "tool"

    def tool_spec(self) -> ToolSpec:
        """The answer tool as the model sees it (tool mode)."""
        return ToolSpec(self.tool_name, self.schema.description, self.schema.schema)

    def request(self) -> OutputRequest:
        """What a model request says of the answer's form."""
        name = self.tool_name if self.as_tool else self.schema.name
        return OutputRequest(
            name=name,
            schema=self.schema.schema,
            description=self.schema.description,
            native=not self.as_tool,
        )


def json_of_text(text: str) -> tuple[Any, str | None]:
    """The JSON value a text answer holds (a fenced code block's too), or what is wrong."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        text = text[3:-3].removeprefix("json").strip()
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"invalid answer: not JSON ({_cut(str(exc))})"
    except RecursionError:
        return None, "invalid answer: it nests too deeply"


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def given_answer(
    answer: StructuredAnswer | None,
    conversation: Sequence[Message],
    answered: AssistantMessage | None,
) -> Any:
    """The structured answer a turn resumed after a crash had already given (`None`: none):
    `answered`'s fitting JSON text, or the answer tool's call in the last assistant message
    that got its (empty, not error) result."""
    if answer is None:
        return None
    if answered is not None:
        text = "".join(b.text for b in answered.content if isinstance(b, TextBlock))
        value, problem = json_of_text(text)
        return value if problem is None and answer.schema.problem(value) is None else None
    if not answer.as_tool:
        return None
    found = [(i, m) for i, m in enumerate(conversation) if isinstance(m, AssistantMessage)]
    if not found:
        return None
    at, asked = found[-1]
    fine = {
        block.tool_use_id
        for message in conversation[at + 1 :]
        if isinstance(message, ToolResultMessage)
        for block in message.content
        if not block.is_error
    }
    calls = (b for b in asked.content if isinstance(b, ToolUseBlock) and b.id in fine)
    for call in calls:
        if call.name == answer.tool_name and answer.schema.problem(call.input) is None:
            return dict(call.input)
    return None


@attrs.frozen
class AnswerAttempt:
    """A response's try at the structured answer: the answer tool's call (`None`: its text),
    the value, and what is wrong with it (`None`: nothing)."""

    call: ToolUseBlock | None
    value: Any
    problem: str | None


NOT_RUN_ANSWERED = "not run: the turn ended with its answer"
"""The result of a tool called beside the answer that ended the turn (or the last wrong one)."""


def answer_attempt(
    answer: StructuredAnswer | None, response: ModelResponse
) -> AnswerAttempt | None:
    """The response's try at the answer; `None` when it is none (it calls other tools only, it
    declines, or no answer is asked for). In tool mode a text answer is taken when it is the
    JSON of a fitting answer (models that ignore the tool do that)."""
    if answer is None or any(isinstance(b, RefusalBlock) for b in response.message.content):
        return None
    calls = response.tool_calls
    if answer.as_tool:
        call = next((c for c in calls if c.name == answer.tool_name), None)
        if call is not None:
            bad = response.bad_arguments.get(call.id)
            return AnswerAttempt(call, dict(call.input), bad or answer.schema.problem(call.input))
    if calls:
        return None
    text = "".join(b.text for b in response.message.content if isinstance(b, TextBlock))
    value, problem = json_of_text(text)
    if problem is None:
        problem = answer.schema.problem(value)
    elif answer.as_tool:
        problem = f"no answer: expected a call of tool {answer.tool_name}"
    return AnswerAttempt(None, value, problem)


def attempt_messages(response: ModelResponse, attempt: AnswerAttempt) -> tuple[Message, ...]:
    """The response and, for an answer call, a result for each of its calls: the answer's
    (empty, or its problems), and for every other call that it was not run."""
    if attempt.call is None:
        return (response.message,)
    answer_id = attempt.call.id
    results = [
        (error_result(call, attempt.problem) if attempt.problem else ToolResultBlock(call.id, ()))
        if call.id == answer_id
        else error_result(call, NOT_RUN_ANSWERED)
        for call in response.tool_calls
    ]
    return response.message, ToolResultMessage(results)


async def judged_answer_call(call: ToolUseBlock, answer: StructuredAnswer) -> ToolResultBlock:
    """The result of an answer call run among others (a resumed turn's, or a wrong one's)."""
    problem = answer.schema.problem(call.input)
    return error_result(call, problem) if problem else ToolResultBlock(call.id, ())


def pending_answer(calls: Sequence[ToolUseBlock], answer: StructuredAnswer | None) -> Any:
    """The first fitting answer among `calls` (a resumed turn's pending calls), or `None`."""
    if answer is None or not answer.as_tool:
        return None
    for call in calls:
        if call.name == answer.tool_name and answer.schema.problem(call.input) is None:
            return dict(call.input)
    return None
