from lpt_bad.base import plugin_info  # noqa: F401
