"""The config's record types, as frozen attrs classes with defaults (every section optional)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from looping_core.config._server import (
    EVENT_LOOPS,
    INSPECTION_PATH,
    MAX_WORKERS,
    ServerConfig,
    bracketed,
)
from looping_core.contract import SecretRef
from looping_core.errors import LoopingError

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "DEFAULT_STUB_CARD",
    "EVENT_LOOPS",
    "INSPECTION_PATH",
    "MAX_WORKERS",
    "CardConfig",
    "Config",
    "LimitsConfig",
    "ModelChoice",
    "ModelPrice",
    "PluginsConfig",
    "PushConfig",
    "RetiredKey",
    "RunnerConfig",
    "SecurityConfig",
    "ServerConfig",
    "SkillConfig",
    "StoreConfig",
    "TenantConfig",
    "TenantLimits",
    "TenantModelConfig",
    "bracketed",
]

DEFAULT_CONFIG_FILE = "looping.toml"
CONFIG_ENV_VAR = "LOOPING_CONFIG"


@attrs.frozen
class SkillConfig:
    """One skill on a tenant's agent card."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


@attrs.frozen
class RetiredKey:
    """`[[security.retired_keys]]`: a previous public key kept in the JWKS until `until`."""

    kid: str
    x: str
    """The Ed25519 public key, base64url (the JWK `x` member)."""
    until: datetime.date


@attrs.frozen
class SecurityConfig:
    """`[security]`: the agent's signing key (by indirection) and the gateways it trusts."""

    signing_key: SecretRef = attrs.field(factory=lambda: SecretRef("A2A_SIGNING_KEY"))
    gateway_origins: tuple[str, ...] = ()
    """Exact `scheme://host[:port]` origins: https, or http on a loopback host."""
    retired_keys: tuple[RetiredKey, ...] = ()
    token_leeway_seconds: int = 30
    """Clock skew allowed on `exp`, `nbf` and `iat` (at most 300)."""
    jwks_cache_seconds: int = 300
    """How long a gateway's key set is used before it is fetched again."""
    jwks_refetch_interval_seconds: int = 30
    """At most one refetch per interval per `jku` for an unknown `kid`."""
    max_token_lifetime_seconds: int = 3600
    """A gateway token whose `exp - iat` is longer is refused (`lifetime-too-long`)."""


DEFAULT_INPUT_MODES = ("text/*", "application/json", "application/pdf", "image/*", "audio/*")
"""What a model-driven agent can be given: text and documents as text, JSON data, PDFs, images
and audio (a deployment narrows or widens it per card)."""
DEFAULT_OUTPUT_MODES = ("text/plain", "application/json")


@attrs.frozen
class CardConfig:
    """A card's own fields: `[card]` for the deployment's public stub, `[tenants.<id>.card]`."""

    name: str
    description: str
    version: str = "0.1.0"
    skills: tuple[SkillConfig, ...] = ()
    input_modes: tuple[str, ...] = DEFAULT_INPUT_MODES
    """Media types (or ranges, `image/*`) the agent takes in a message's parts; the edge refuses
    a part of any other type (ContentTypeNotSupported) and the card declares exactly these."""
    output_modes: tuple[str, ...] = DEFAULT_OUTPUT_MODES
    """Media types the agent answers with (the card's `defaultOutputModes`)."""


@attrs.frozen
class StubCardConfig(CardConfig):
    """`[card]`: the deployment's public stub card, served to anyone without a token."""

    list_tenants: bool = False
    """Name every tenant (its id and card name) in the stub card. Off by default: behind one
    endpoint that list is the deployment's customer list, given to anyone who asks."""


@attrs.frozen
class StoreConfig:
    """`[store]`: the database URL (SQLite by default: one file, nothing to start).

    A relative SQLite path is the config file's folder's (resolved when the file is loaded). A
    URL with a password is a secret: write `url = "env:DATABASE_URL"` and put it there."""

    url: str = "sqlite:///looping.db"
    secrets_key: SecretRef | None = None
    """What seals push configs' token and credentials at rest: a secret of at least 32
    characters. None: a key derived from the agent's signing key (nothing to set up)."""
    previous_secrets_keys: tuple[SecretRef, ...] = ()
    """Keys values may still be sealed with, during a rotation: earlier `secrets_key` values,
    or an earlier signing key (its private JWK) when none was set."""
    connections: int | None = None
    """PostgreSQL: how many connections one server or worker process runs store jobs on, each
    on a thread of its own (SQLite has one writer, so one); none: the store's default, 8. More
    overlap more round trips to a database far away; fewer cost less CPU where jobs are many
    and quick (see the Benchmarks page)."""

    def location(self, environ: Mapping[str, str] | None = None) -> str:
        """The URL to open: `url`, or the value of the variable `env:NAME` names (read now)."""
        if not self.url.startswith("env:"):
            return self.url
        secret = SecretRef.parse(self.url)
        if not secret.is_set(environ):
            raise LoopingError(
                f"[store] url is read from the environment variable {secret.env}, which is not "
                "set; export it before starting"
            )
        return secret.value(environ)


@attrs.frozen
class ModelChoice:
    """One chat model: `[tenants.<id>.model]`, or one of its `[[...model.fallback]]` entries."""

    model: str
    """The model's name as its provider knows it (`gpt-4o-mini`, `llama3.2`)."""
    provider: str = "openai"
    """A model provider: the built-in `openai` (any OpenAI-compatible endpoint) or a plugin's."""
    base_url: str | None = None
    api_key: SecretRef | None = None
    context_window: int | None = None
    """Tokens the model takes in at most (compaction keeps requests under it)."""
    timeout_seconds: float = 60.0
    max_retries: int = 2
    """The client's own retries (connection errors, 429, 5xx) before the next model is tried."""
    options: Mapping[str, Any] = attrs.field(factory=dict)
    """Passed to the provider as they are (temperature, seed, ...)."""


@attrs.frozen
class ModelPrice:
    """`[prices."<model>"]`: what a model's tokens cost, per million, in the currency the
    deployment bills in (core names none). Reasoning tokens are output tokens."""

    input: float
    """Prompt tokens read without a cache."""
    output: float
    """Generated tokens (reasoning included)."""
    cached_input: float | None = None
    """Prompt tokens read from the provider's cache (absent: the `input` price)."""
    cache_write: float | None = None
    """Prompt tokens written to the provider's cache (absent: the `input` price)."""


@attrs.frozen
class TenantModelConfig(ModelChoice):
    """`[tenants.<id>.model]`: the model, and the ones tried in order when it is unavailable."""

    fallback: tuple[ModelChoice, ...] = ()

    @property
    def smallest_context_window(self) -> int | None:
        """The smallest window the model and its fallbacks declare: a request must fit whichever
        of them serves it (`None` when none declares one)."""
        windows = [c.context_window for c in (self, *self.fallback) if c.context_window]
        return min(windows, default=None)


@attrs.frozen
class LoopSettings:
    """`[tenants.<id>.loop]`: what the deployment overrides of a model-driven agent's own
    settings (`LoopingAgent.agent_config()`); an absent key keeps the agent's value."""

    max_rounds: int | None = None
    """Model calls per turn."""
    max_tokens: int | None = None
    """Input and output tokens per turn."""
    max_seconds: float | None = None
    """Seconds per turn."""
    tool_timeout_seconds: float | None = None
    max_parallel_tools: int | None = None
    compact_at: float | None = None
    """The fraction of the context window a request may fill before compaction."""
    keep_last: int | None = None
    """The latest user turns compaction never displaces."""
    summary_max_tokens: int | None = None
    output_mode: str | None = None
    """How an agent that answers in a schema asks its model for the answer: `tool` (a final
    answer tool whose input schema is the answer's; any tool-calling model) or `native` (the
    provider's own structured output: `response_format` on the `openai` provider)."""
    output_retries: int | None = None
    """How many answers that do not fit the schema the model may correct before the turn
    fails (`OUTPUT_INVALID`)."""
    max_cost: float | None = None
    """What one turn's model calls may cost (the `[prices]` table's currency)."""


@attrs.frozen
class LimitsConfig:
    """`[limits]`: what one tenant, and one caller of a tenant, may take of the server, so
    that neither can starve the others. A caller is (tenant, issuer, subject). 0: no limit."""

    caller_turns: int = 8
    """Turns one caller may have accepted and not yet settled (waiting to run, or running);
    one more SendMessage is refused (`TOO_MANY_TURNS`, HTTP 429) before anything is written.
    Counted in the store: every server process and worker together."""
    tenant_turns: int = 64
    """The same, for all the tenant's callers together."""
    caller_requests_per_second: float = 20.0
    """Requests one caller may make per second, every method; more are refused
    (`RATE_LIMITED`, HTTP 429, `Retry-After`). Counted per server process."""
    tenant_requests_per_second: float = 200.0
    """The same, for all the tenant's callers together."""
    burst_seconds: float = 2.0
    """How many seconds' worth of requests may come at once after a quiet spell (a caller
    at 20 per second may send 40 together)."""
    caller_daily_cost: float = 0.0
    """What one caller's turns may cost per day (UTC), in the `[prices]` table's currency:
    once its turns of the day have cost this much, a SendMessage that would begin a turn is
    refused (`DAILY_BUDGET_SPENT`, HTTP 429, `Retry-After` until midnight UTC) before
    anything is written."""


@attrs.frozen
class TenantLimits:
    """`[tenants.<id>.limits]`: this tenant's own values of `[limits]` keys."""

    caller_turns: int | None = None
    tenant_turns: int | None = None
    caller_requests_per_second: float | None = None
    tenant_requests_per_second: float | None = None
    burst_seconds: float | None = None
    caller_daily_cost: float | None = None

    def over(self, defaults: LimitsConfig) -> LimitsConfig:
        """`defaults` with this tenant's own values in their place."""
        own = {name: value for name, value in attrs.asdict(self).items() if value is not None}
        return attrs.evolve(defaults, **own)


@attrs.frozen
class TenantConfig:
    """`[tenants.<id>]`: one agent behind the shared endpoint."""

    agent: str
    """The agent class as `"package.module:ClassName"` (imported when the server starts)."""
    card: CardConfig
    plugins: tuple[str, ...] | None = None
    """The subset of `[plugins] enabled` this tenant uses; absent means all of them."""
    allow_configless: bool = False
    """Accept SendMessage without an inline push config (the official SDK client, conformance
    suites); the gateway contract requires one."""
    max_wait_seconds: int = 30
    """How long a blocking SendMessage (`returnImmediately: false`) waits for the task to end or
    ask for input before it returns the task as it is."""
    model: TenantModelConfig | None = None
    """The tenant's chat model and its fallbacks (agents that call a model read it)."""
    loop: LoopSettings = LoopSettings()
    """Overrides of a model-driven agent's loop settings (budgets, compaction)."""
    limits: TenantLimits = TenantLimits()
    """Overrides of `[limits]` for this tenant; an absent key keeps `[limits]`' value."""


@attrs.frozen
class RunnerConfig:
    """`[runner]`: who runs turns and pushes, and how many at once."""

    concurrency: int = 16
    """Turns running at once per process; more wait their turn."""
    on_restart: str = "fail"
    """What happens to turns a crash left SUBMITTED or WORKING: "fail" them, or "resume" them."""
    restart_message: str = "The agent restarted while it was working on this task."
    """The status message of a task failed by a restart."""
    engine: str = "auto"
    """`embedded`: turns and pushes run in the process that accepted them (a node and worker
    slot own them); `procrastinate`: they are jobs in a PostgreSQL job engine, which any worker
    process on any machine runs; `auto`: the engine on PostgreSQL, embedded on SQLite."""
    serve_runs_jobs: bool = True
    """With the job engine, `looping serve` runs jobs too (one machine, one command); false:
    it only accepts them, and `looping worker` processes run them."""
    heartbeat_seconds: float = 5.0
    """How often a job worker says it is alive (job engine)."""
    stalled_after_seconds: float = 20.0
    """A worker silent this long is dead: its jobs are run again elsewhere (job engine)."""
    sweep_seconds: int = 5
    """How often the jobs of dead workers are looked for (a divisor of 60; job engine)."""


@attrs.frozen
class PushConfig:
    """`[push]`: delivering push notifications through the durable outbox."""

    timeout_seconds: float = 10.0
    max_attempts: int = 8
    max_age_seconds: int = 86_400
    """A notification older than this is given up (expired), whatever its attempts."""
    backoff_seconds: float = 1.0
    """The first retry waits about this long; each further one twice as long (with jitter)."""
    backoff_max_seconds: float = 300.0
    progress: bool = False
    """Also push a working task's progress (its status messages while it runs); by default only
    the end of a turn and a request for input are pushed. Streams always see progress."""


ENGINES = ("auto", "embedded", "procrastinate")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


@attrs.frozen
class RetentionConfig:
    """`[retention]`: how long finished work is kept. 0 keeps it forever. Never a task that has
    not ended (one waiting for input included), never a push still being delivered."""

    finished_after_seconds: int = 30 * 86400
    """Ended tasks (completed, failed, canceled, rejected) this long after their end, with all
    that hangs off them: messages, artifacts, events, push configs, their pushes and attempts,
    subtasks, and the sessions of their conversations once no task of it is left."""
    events_after_seconds: int = 86400
    """Events of ended tasks this old (streams resume from them only while a task runs)."""
    delivered_pushes_after_seconds: int = 86400
    """Pushes done with (delivered, failed, expired) this old, with their attempts."""
    interval_seconds: int = 3600
    """How often it runs: a whole number of minutes that divides an hour, or of hours that
    divides a day (the job engine runs it as a periodic job; embedded, a timer)."""


RETENTION_INTERVALS = (
    *(60 * m for m in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)),
    *(3600 * h for h in (1, 2, 3, 4, 6, 8, 12, 24)),
)


@attrs.frozen
class ObservabilityConfig:
    """`[observability]`: how the server logs, where it exposes metrics and sends traces."""

    log_level: str = "info"
    """`debug`, `info`, `warning` or `error` (`looping serve --log-level` overrides it)."""
    log_format: str = "text"
    """`text`: one readable line; `json`: one JSON object per line, with the request id, tenant,
    caller subject and task id where known (never a token)."""
    metrics_port: int = 0
    """Serve Prometheus metrics at `http://{metrics_host}:{metrics_port}/metrics`, every worker
    process's values together (the `prometheus` extra); 0: no metrics."""
    metrics_host: str = "127.0.0.1"
    """Where the metrics listener binds: loopback, unless a scraper elsewhere must reach it."""
    traces_endpoint: str = ""
    """Send OpenTelemetry traces to this OTLP/HTTP endpoint (`http://collector:4318/v1/traces`;
    the `otel` extra); empty: `looping serve` sends none (a program embedding the server uses
    its own tracer provider)."""
    service_name: str = "looping-core"
    """The traces' `service.name`."""
    capture_message_content: bool = False
    """Put message content in the agents' GenAI spans (the conversation a model is sent, its
    answer, tool calls' arguments and results); off by default: it is the callers' data."""


@attrs.frozen
class StreamingConfig:
    """`[streaming]`: SendStreamingMessage and SubscribeToTask over server-sent events."""

    enabled: bool = True
    """Serve the streaming methods (the card then says `streaming: true`)."""
    poll_seconds: float = 0.02
    """How often a server process looks for events other processes wrote to a SQLite store
    (its own it sends at once; PostgreSQL tells it at once). A look is one cheap check of
    whether anyone else committed, and reads events only then."""
    buffer_events: int = 256
    """Events held for a subscriber that does not read; past that it is dropped (it resumes
    with `Last-Event-ID`), so a slow client never slows the turn or other subscribers."""
    heartbeat_seconds: float = 15.0
    """An idle stream gets an SSE comment this often, so proxies keep it open."""
    coalesce_seconds: float = 0.05
    """Artifact chunks of one task closer together than this are sent as one event."""
    write_timeout_seconds: float = 30.0
    """A stream whose client takes no event (nor heartbeat) for this long is disconnected and
    counted as dropped: an unread stream must not hold its connection forever."""
    max_streams_per_caller: int = 16
    """Open streams one caller (tenant, issuer, subject) may hold in one server process; one
    more is refused (`TOO_MANY_STREAMS`, HTTP 429)."""


@attrs.frozen
class PluginsConfig:
    """`[plugins]`: which installed plugins are selected, and each one's raw settings table."""

    enabled: tuple[str, ...] = ()
    settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)


@attrs.frozen
class Config:
    """The whole config file. `source` is the file it came from (for error messages)."""

    source: str = "<defaults>"
    server: ServerConfig = attrs.field(factory=ServerConfig)
    security: SecurityConfig = SecurityConfig()
    store: StoreConfig = StoreConfig()
    card: StubCardConfig = attrs.field(factory=lambda: DEFAULT_STUB_CARD)
    runner: RunnerConfig = RunnerConfig()
    push: PushConfig = PushConfig()
    streaming: StreamingConfig = StreamingConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    retention: RetentionConfig = RetentionConfig()
    limits: LimitsConfig = LimitsConfig()
    plugins: PluginsConfig = PluginsConfig()
    prices: Mapping[str, ModelPrice] = attrs.field(factory=dict)
    """`[prices]`: by model (`gpt-4o-mini`), or by provider and model (`openai:gpt-4o-mini`),
    which wins."""
    tenants: Mapping[str, TenantConfig] = attrs.field(factory=dict)

    @property
    def source_folder(self) -> Path | None:
        """The folder of the file it came from (`None`: it came from no file): where relative
        paths in it, and its agents' own modules, are."""
        path = Path(self.source)
        return path.resolve().parent if path.is_file() else None

    def limits_of(self, tenant: str) -> LimitsConfig:
        """The limits that hold for `tenant`: `[limits]`, with its own overrides."""
        own = self.tenants.get(tenant)
        return self.limits if own is None else own.limits.over(self.limits)

    def uses_job_engine(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether turns and pushes are jobs in the job engine (`[runner] engine`): asked for,
        or `auto` on a PostgreSQL store."""
        if self.runner.engine != "auto":
            return self.runner.engine == "procrastinate"
        return self.store.location(environ).startswith(("postgresql:", "postgres:"))


DEFAULT_STUB_CARD: StubCardConfig = StubCardConfig(
    name="looping-core agents",
    description="Agents behind one A2A endpoint; ask the gateway for a tenant's own card.",
)
