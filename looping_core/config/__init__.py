"""The `looping.toml` config: TOML read with `tomllib` into frozen attrs classes.

Structuring goes through a private cattrs converter that refuses unknown keys, so a typo is an
error rather than a silently ignored setting. Every problem in a file is reported at once, each as
`problem @ $.path`, in one `ConfigError` that names the file.

`[plugins.<key>]` tables are kept raw here: only the plugin knows its config type, so the plugin
host structures them (with `structure_plugin_config`, same converter, same error format) after
the plugin is loaded.

Adding a section: define a frozen attrs class with defaults, add a field to `Config`, add it to
`contracts/config.schema.json` and document it in docs/config.md.
"""

from looping_core.config._checks import check_model
from looping_core.config._load import (
    load_config,
    parse_config,
    resolve_config_path,
    structure_plugin_config,
)
from looping_core.config._model import (
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_FILE,
    EVENT_LOOPS,
    INSPECTION_PATH,
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_WORKERS,
    CardConfig,
    Config,
    LimitsConfig,
    LoopSettings,
    ModelChoice,
    ModelPrice,
    ObservabilityConfig,
    PluginsConfig,
    PushConfig,
    RetentionConfig,
    RetiredKey,
    RunnerConfig,
    SecurityConfig,
    ServerConfig,
    SkillConfig,
    StoreConfig,
    StreamingConfig,
    StubCardConfig,
    TenantConfig,
    TenantLimits,
    TenantModelConfig,
)
from looping_core.config._prices import price_of

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "EVENT_LOOPS",
    "INSPECTION_PATH",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MAX_WORKERS",
    "CardConfig",
    "Config",
    "LimitsConfig",
    "LoopSettings",
    "ModelChoice",
    "ModelPrice",
    "ObservabilityConfig",
    "PluginsConfig",
    "PushConfig",
    "RetentionConfig",
    "RetiredKey",
    "RunnerConfig",
    "SecurityConfig",
    "ServerConfig",
    "SkillConfig",
    "StoreConfig",
    "StreamingConfig",
    "StubCardConfig",
    "TenantConfig",
    "TenantLimits",
    "TenantModelConfig",
    "check_model",
    "load_config",
    "parse_config",
    "price_of",
    "resolve_config_path",
    "structure_plugin_config",
]
