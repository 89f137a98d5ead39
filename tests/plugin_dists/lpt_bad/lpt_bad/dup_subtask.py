import attrs

from looping_core.contract import SubtaskRecipe, SubtaskType
from looping_core.hookspecs import hookimpl
from lpt_bad.base import contract_version, plugin_info  # noqa: F401


@attrs.frozen
class Params:
    topic: str


@hookimpl
def subtask_types():
    return [
        SubtaskType(
            key="good-subtask",
            description="d",
            params_type=Params,
            recipe=lambda params: SubtaskRecipe(instructions="i"),
        )
    ]
