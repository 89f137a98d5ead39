"""Tools as typed functions.

```python
from typing import Annotated
from looping_core.tools import tool

@tool
async def count_words(text: Annotated[str, "The text to count"]) -> int:
    \"\"\"Count the words in a text.\"\"\"
    return len(text.split())
```

`count_words` is a `Tool` (a `FunctionTool`: calling it still calls the function). Its name is
the function's, its description the docstring's text, its JSON Schema what the type hints say
(see the table below); a parameter's description comes from `Annotated[T, "..."]` or
the docstring's parameter section (Google, NumPy or reST). Arguments are checked against the
schema and structured into the parameters' types before the call; a mismatch is the error
result the model sees. A parameter typed `ToolCall` or `ToolContext` gets the call being served
or the context the agent built its tools with, never a model's argument.

The schema of each hint:

| hint | schema |
|---|---|
| `str`, `int`, `float`, `bool`, `None` | `string`, `integer`, `number`, `boolean`, `null` |
| `Literal[...]`, an `Enum` (JSON scalar values) | `enum` (with `type` when the values share one) |
| `list[T]`, `Sequence[T]`, `tuple[T, ...]` | `array` of `T` |
| `set[T]`, `frozenset[T]` | `array` of `T` with `uniqueItems` |
| `tuple[A, B]` | `array` with `prefixItems`, exactly that long |
| `dict[str, T]`, `Mapping[str, T]` | `object` with `additionalProperties: T` |
| `X | Y`, `X | None` | `anyOf` |
| an attrs class, a dataclass, a `TypedDict` (nested) | `object`: its fields, the required ones |
| `Any` | `{}` (any JSON value) |
| `Annotated[T, "words"]` | `T`'s schema with that `description` |

A function that cannot be described is refused when `tool` is applied (`ToolDefinitionError`,
naming the function, the parameter and the fix), so a server whose agent module has one does
not start. Hand-written `Tool(name, description, input_schema, handler)` keeps working.

Every input schema, written or generated, is used without I/O: `schema_problem` says why one
cannot be used (a `$ref` outside it or in a loop, an unknown dialect, too deep), and
`argument_problems` checks a call's arguments with a validator that never fetches or reads a
file, reporting any failure as a problem rather than raising it.
"""

from looping_core.tools._function import (
    ApprovalRule,
    FunctionTool,
    ToolDefinitionError,
    schema_of,
    structurer_of,
    tool,
)
from looping_core.tools._input_schemas import SchemaUnusable, argument_problems, schema_problem

__all__ = [
    "ApprovalRule",
    "FunctionTool",
    "SchemaUnusable",
    "ToolDefinitionError",
    "argument_problems",
    "schema_of",
    "schema_problem",
    "structurer_of",
    "tool",
]
