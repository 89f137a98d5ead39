"""The tool loop: ask the model, run the tools it calls, give it their results, until it answers
without tools or a budget is spent.

Nothing a model sends crashes a turn: a call to an unknown tool, arguments that do not match the
tool's JSON Schema, a handler that raises or runs past its timeout each become an error tool
result the model sees next (and a log line). Tool calls of one response run at once, at most
`max_parallel_tools` at a time; their results go back in the order the model called them.

Every step is handed to the `StepLog` before the next begins (the model's message, then the
tools' results), so a durable log makes every step durable.

Budgets (`Budget`): when model calls, tokens or seconds are spent, one last call is made without
tools (but the answer tool, for a structured answer) and with the app's `budget_note` added to
the system text, so the caller gets an answer rather than silence. The texts of error results are
terse facts (`unknown tool: x`), not prose: the words a model is told to act on are the app's.

A structured answer (`answer`, see `_output.py`) ends the loop only when it fits its schema: one
that does not is answered with its problems (an error result of the answer tool's call, or in
native mode a user message of them) and the model tries again, at most `retries` times; then the
loop ends with `LoopOutcome.answer_problem`. Tools called beside the answer that ends the loop
are not run (their error result says so).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from looping_core.agent._compaction import Compactor
from looping_core.agent._model import (
    ChatModel,
    ContextTooLong,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolSpec,
    respond_with_fallback,
)
from looping_core.agent._output import (
    StructuredAnswer,
    answer_attempt,
    attempt_messages,
    judged_answer_call,
    pending_answer,
)
from looping_core.agent._prices import Prices, add_cost
from looping_core.agent._tool_calls import (
    NOT_APPROVABLE,
    NOT_TAKEN_WAITING,
    argument_problem,
    call_tool,
    error_result,
    needs_approval,
)
from looping_core.content import (
    AssistantMessage,
    AudioBlock,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from looping_core.contract import Tool, ToolContext

__all__ = ["Budget", "ControlAction", "Inbox", "LoopOutcome", "StepLog", "run_tool_loop"]

_log = logging.getLogger("looping_core.agent")

_RESULT_BLOCKS = (TextBlock, ImageBlock, AudioBlock, DocumentBlock, DataBlock)


@attrs.frozen
class Budget:
    """What one turn may spend: model calls, tokens (input and output), seconds, and money
    (`max_cost`, in the `[prices]` table's currency: only priced calls count)."""

    max_rounds: int = 20
    max_tokens: int | None = None
    max_seconds: float | None = None
    max_cost: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError("max_rounds must be at least 1")


@attrs.frozen
class ControlAction:
    """A way out of the loop the app offers the model, as a tool it may call: ask the caller for
    input (`INPUT_REQUIRED`) or decline (`REJECTED`). The name and description are the app's;
    the model passes the words for the caller in `message`."""

    name: str
    description: str
    outcome: str = attrs.field(validator=attrs.validators.in_(("input_required", "rejected")))
    input_schema: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        }
    )


@attrs.frozen
class LoopOutcome:
    """What the loop did: the messages it added (in order), the last response, the usage summed
    over its model calls, which model served each call, and the budget that ran out, if any."""

    messages: tuple[Message, ...]
    final: ModelResponse
    usage: Usage
    served_by: tuple[str, ...]
    exhausted: str | None = None
    control: tuple[ControlAction, ToolUseBlock] | None = None
    """The control action the model took, and its call, if the loop ended with one."""
    compactions: int = 0
    """How often the conversation was compacted (summaries' usage is in `usage`)."""
    answer: Any = None
    """The structured answer (a JSON object that fits the schema), when one was asked for and
    given."""
    answer_problem: str | None = None
    """Why no structured answer fits, when one was asked for and the retries ran out."""
    awaiting: tuple[ToolUseBlock, ...] = ()
    """Tool calls that wait for the caller's approval: the loop ended to ask for it."""
    cost: float | None = None
    """What its model calls cost (summaries included), by the prices it was given; `None`
    when no call was priced."""

    @property
    def rounds(self) -> int:
        return len(self.served_by)


class StepLog(Protocol):
    """Where each step goes before the next begins (a durable session, say)."""

    async def append(self, messages: Sequence[Message]) -> None: ...


Inbox = Callable[[], Awaitable[Sequence[Message]]]
"""Messages the caller sent since the last look (durable already), oldest first."""


async def run_tool_loop(
    models: Sequence[ChatModel],
    request: ModelRequest,
    tools: Sequence[Tool] = (),
    *,
    budget: Budget | None = None,
    budget_note: str = "",
    log: StepLog | None = None,
    tool_timeout: float = 60.0,
    max_parallel_tools: int = 4,
    clock: Callable[[], float] = time.monotonic,
    pending: Sequence[ToolUseBlock] = (),
    actions: Sequence[ControlAction] = (),
    compactor: Compactor | None = None,
    inbox: Inbox | None = None,
    on_text: TextSink | None = None,
    tool_context: ToolContext | None = None,
    answer: StructuredAnswer | None = None,
    approvals: bool = False,
    prices: Prices | None = None,
) -> LoopOutcome:
    """Run the loop from `request` (its messages end with the new user message, or, for a
    resumed turn, with its last durable step). `pending` are tool calls of the last message
    that have no results yet: they run before the next model call.

    `compactor` keeps each request under the context window; `inbox` gives the messages the
    caller sent while the loop ran (already durable): they join the conversation before the next
    model call, and an answer given while one waits is not the last word. `on_text` is given
    each response's text as it streams. `tool_context` is what the tools were built with: a
    handler finds it on its `ToolCall` (a typed tool's `ToolContext` parameter). `answer`: the
    structured answer the loop must end with (`LoopOutcome.answer`). `approvals`: the caller
    can be asked to approve calls (`Tool.requires_approval`): the loop runs the other calls of
    the response and ends with those (`LoopOutcome.awaiting`); without, they are never run and
    the model is told so. `prices`: what each call cost (`LoopOutcome.cost`, and the
    budget's `max_cost`).
    """
    controls = {action.name: action for action in actions}
    specs = tuple(ToolSpec(t.name, t.description, t.input_schema) for t in tools) + tuple(
        ToolSpec(a.name, a.description, a.input_schema) for a in actions
    )
    last_specs: tuple[ToolSpec, ...] = ()
    if answer is not None:
        request = attrs.evolve(request, output=answer.request())
        if answer.as_tool:
            last_specs = (answer.tool_spec(),)
            specs += last_specs
    dispatch = functools.partial(
        _dispatch,
        tools={tool.name: tool for tool in tools},
        controls=controls,
        timeout=tool_timeout,
        slots=asyncio.Semaphore(max_parallel_tools),
        context=tool_context,
        answer=answer,
        approvals=approvals,
    )
    run = _Run(request, log, compactor, inbox, clock(), prices=prices)
    if pending:
        results, taken, awaiting = await dispatch(pending)
        if results:
            await run.record(ToolResultMessage(results))
        given = pending_answer(pending, answer)
        if taken is not None or given is not None or awaiting:  # it had ended before a crash
            asked = next(m for m in reversed(request.messages) if isinstance(m, AssistantMessage))
            final = ModelResponse(asked, "tool_use", served_by="")
            return run.outcome(final, control=taken, answer=given, awaiting=awaiting)
    wrong_answers = 0
    budget = budget or Budget()
    while True:
        await run.more_arrived()  # what the caller sent meanwhile joins before the model call
        exhausted = _spent(budget, run, clock() - run.started)
        last_call = exhausted is not None
        step = attrs.evolve(
            request,
            messages=tuple(run.conversation),
            tools=last_specs if last_call else specs,
            system=_with_note(request.system, budget_note) if last_call else request.system,
        )
        response = await run.ask(models, step, on_text)
        calls = response.tool_calls
        attempt = answer_attempt(answer, response)
        if attempt is not None and answer is not None:
            wrong_answers += attempt.problem is not None
            if attempt.problem is None or last_call or wrong_answers > answer.retries:
                await run.record(*attempt_messages(response, attempt))
                if attempt.problem is None and not last_call and await run.more_arrived():
                    continue  # the caller said more while the model answered: answer that too
                fits = attempt.problem is None
                return run.outcome(
                    response, exhausted=exhausted, answer=attempt.value if fits else None,
                    answer_problem=attempt.problem,
                )  # fmt: skip
            if attempt.call is None:  # a text answer: its problems are the next user message
                await run.record(response.message, UserMessage((TextBlock(attempt.problem),)))
                continue
            # The answer call gets its problems as its result; the other calls run as usual.
        if last_call or not calls:
            await run.record(response.message)
            if not last_call and await run.more_arrived():
                continue  # the caller said more while the model answered: answer that too
            return run.outcome(response, exhausted=exhausted)
        malformed = [
            error_result(c, response.bad_arguments[c.id])
            for c in calls
            if c.id in response.bad_arguments
        ]
        # Answered at once, in the same write as the calls: a resumed turn never runs them.
        await run.record(response.message, *([ToolResultMessage(malformed)] if malformed else []))
        results, taken, awaiting = await dispatch(
            [call for call in calls if call.id not in response.bad_arguments]
        )
        if results:
            await run.record(ToolResultMessage(results))
        if taken is not None or awaiting:
            return run.outcome(response, control=taken, awaiting=awaiting)


class _Run:
    """One run of the loop: the conversation as it grows, what it added, which models served
    it and their usage; each step goes to the log before the conversation goes on with it."""

    def __init__(
        self,
        request: ModelRequest,
        log: StepLog | None,
        compactor: Compactor | None,
        inbox: Inbox | None,
        started: float,
        *,
        prices: Prices | None = None,
    ) -> None:
        self.conversation = list(request.messages)
        self.added: list[Message] = []
        self.served: list[str] = []
        self.usage = Usage()
        self.cost: float | None = None
        self.started = started
        self._prices = prices
        self._log = log
        self._compactor = compactor
        self._inbox = inbox

    async def record(self, *messages: Message) -> None:
        """Hand `messages` to the log (one write) before the conversation goes on with them."""
        if self._log is not None:
            await self._log.append(messages)
        self.conversation.extend(messages)
        self.added.extend(messages)

    async def more_arrived(self) -> bool:
        """Whether the caller sent more since the last look (durable already; now in the
        conversation)."""
        if self._inbox is None:
            return False
        arrived = await self._inbox()
        self.conversation.extend(arrived)
        self.added.extend(arrived)
        return bool(arrived)

    async def ask(
        self, models: Sequence[ChatModel], step: ModelRequest, on_text: TextSink | None
    ) -> ModelResponse:
        """The models' response to `step` (compacted first when needed), counted."""
        step, response = await _ask(models, step, self._compactor, on_text, self._prices)
        self.conversation[:] = step.messages
        self.served.append(response.served_by)
        self.usage = self.usage + (response.message.usage or Usage())
        self.cost = add_cost(self.cost, response.message.cost)
        return response

    @property
    def total_cost(self) -> float | None:
        """What the calls so far cost, summaries included (`None`: none was priced)."""
        summaries = self._compactor.cost if self._compactor is not None else None
        return add_cost(self.cost, summaries)

    def outcome(
        self,
        response: ModelResponse,
        *,
        exhausted: str | None = None,
        control: tuple[ControlAction, ToolUseBlock] | None = None,
        answer: Any = None,
        answer_problem: str | None = None,
        awaiting: tuple[ToolUseBlock, ...] = (),
    ) -> LoopOutcome:
        usage, compactions = self.usage, 0
        if self._compactor is not None:
            usage = usage + self._compactor.usage
            compactions = self._compactor.compactions
        return LoopOutcome(
            tuple(self.added), response, usage, tuple(self.served), exhausted, control,
            compactions, answer, answer_problem, awaiting, self.total_cost,
        )  # fmt: skip


async def _dispatch(
    calls: Sequence[ToolUseBlock],
    *,
    tools: Mapping[str, Tool],
    controls: Mapping[str, ControlAction],
    timeout: float,
    slots: asyncio.Semaphore,
    context: ToolContext | None,
    answer: StructuredAnswer | None = None,
    approvals: bool = False,
) -> tuple[
    list[ToolResultBlock], tuple[ControlAction, ToolUseBlock] | None, tuple[ToolUseBlock, ...]
]:
    """The results of `calls`, in their order (none for those that wait for approval), the
    control action taken among them, and the calls that wait for the caller's approval. While
    some wait, no control action is taken (the turn ends asking for the approvals)."""
    waiting = [c for c in calls if needs_approval(c, tools, context)]
    taken = None if waiting else _control(calls, controls)
    answer_tool = answer.tool_name if answer is not None and answer.as_tool else None
    results = await asyncio.gather(
        *(
            _refused(call, NOT_APPROVABLE) if call in waiting else
            _acknowledged(call) if taken and call is taken[1] else
            _refused(call, NOT_TAKEN_WAITING) if waiting and call.name in controls else
            _refused_control(call, controls[call.name]) if call.name in controls else
            judged_answer_call(call, answer) if answer is not None and call.name == answer_tool else
            call_tool(call, tools, timeout, slots, context)
            for call in calls
            if not (approvals and call in waiting)
        )
    )  # fmt: skip
    return list(results), taken, tuple(waiting) if approvals else ()


async def _ask(
    models: Sequence[ChatModel],
    step: ModelRequest,
    compactor: Compactor | None,
    on_text: TextSink | None = None,
    prices: Prices | None = None,
) -> tuple[ModelRequest, ModelResponse]:
    """The models' response to `step`, compacted first when it would not fit; a "context too
    long" error compacts and tries once more. Returns the request as it was sent."""
    if compactor is not None and compactor.over(step):
        step = attrs.evolve(step, messages=await compactor.compact(step))
    try:
        response = await respond_with_fallback(models, step, on_text, prices)
    except ContextTooLong:
        if compactor is None:
            raise
        compacted = await compactor.compact(step)
        if compacted == step.messages:
            raise
        step = attrs.evolve(step, messages=compacted)
        response = await respond_with_fallback(models, step, on_text, prices)
    if compactor is not None:
        compactor.observe(step, response)
    return step, response


def _control(
    calls: Sequence[ToolUseBlock], controls: Mapping[str, ControlAction]
) -> tuple[ControlAction, ToolUseBlock] | None:
    """The first call of a control action with valid arguments (an invalid one is answered as
    any bad tool call is, and the loop goes on)."""
    for call in calls:
        action = controls.get(call.name)
        if action is not None and argument_problem(call, action.input_schema) is None:
            return action, call
    return None


async def _refused(call: ToolUseBlock, text: str) -> ToolResultBlock:
    return error_result(call, text)


async def _acknowledged(call: ToolUseBlock) -> ToolResultBlock:
    """The result of a control action's call: empty (the caller answers in the next turn)."""
    return ToolResultBlock(call.id, ())


async def _refused_control(call: ToolUseBlock, action: ControlAction) -> ToolResultBlock:
    """A control action called with arguments that fail its schema (or after another one)."""
    problem = argument_problem(call, action.input_schema)
    return error_result(call, problem or f"{action.name} was not taken: another action was")


def _spent(budget: Budget, run: _Run, seconds: float) -> str | None:
    """Which budget leaves room for one last call only (`None`: the loop may go on)."""
    if len(run.served) >= budget.max_rounds - 1:
        return "max_rounds"
    if budget.max_tokens is not None and run.usage.total_tokens >= budget.max_tokens:
        return "max_tokens"
    if budget.max_seconds is not None and seconds >= budget.max_seconds:
        return "max_seconds"
    if budget.max_cost is not None and (run.total_cost or 0.0) >= budget.max_cost:
        return "max_cost"
    return None


def _with_note(system: str, note: str) -> str:
    if not note:
        return system
    return f"{system}\n\n{note}" if system else note
