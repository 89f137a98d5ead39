"""The `looping` command, run as a real process: clean messages, exit codes, lazy imports."""

from __future__ import annotations

import inspect
import json
import re
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from looping_core.a2a import Message, Part, Role, TaskPushNotificationConfig
from looping_core.contract import Identity
from looping_core.store.internal import Database, PushSecrets, TaskStore, bind, upgrade
from looping_core.testing import ed25519_private_jwk

from support.ports import unused_port

Cli = Callable[..., subprocess.CompletedProcess[str]]

ROOT = Path(__file__).parents[1]
EXAMPLE = str(ROOT / "examples/looping.toml")
KEY = {"A2A_SIGNING_KEY": json.dumps(ed25519_private_jwk("cli-key"))}
TENANT = (
    '[tenants.t]\nagent = "looping_plugins_example.agent:WordCountAgent"\n'
    '[tenants.t.card]\nname = "T"\ndescription = "T."\n'
    'skills = [{ id = "s", name = "S", description = "S.", tags = ["s"] }]\n'
)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_check_accepts_the_example_config(looping_cli: Cli) -> None:
    result = looping_cli("check", "--config", EXAMPLE, env=KEY)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"{EXAMPLE}: OK. Plugins: plugin 'example-notes' (looping-plugins-example 0.1.0), "
        "plugin 'example-gates' (looping-plugins-example 0.1.0), "
        "plugin 'example-workspaces' (looping-plugins-example 0.1.0). "
        "Tenants: notes, planner, refunds, triage, words.\n"
    )


def test_check_reads_looping_config_from_the_environment(looping_cli: Cli) -> None:
    result = looping_cli("check", env={"LOOPING_CONFIG": EXAMPLE, **KEY})
    assert result.returncode == 0, result.stderr


def test_check_lists_every_config_problem_without_a_traceback(
    looping_cli: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path / "bad.toml", '[server]\nport = "x"\n[plugins]\nenabled = [1]\n')
    result = looping_cli("check", "--config", path, env=KEY)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"{path}: 2 startup problems:\n"
        "  - expected a plugin key (an entry-point name) @ $.plugins.enabled[0]\n"
        "  - expected an integer, got string @ $.server.port\n"
    )


def test_config_problems_hide_no_other_problem_from_check(looping_cli: Cli, tmp_path: Path) -> None:
    """A wrong type, a value out of range in the same section, no signing key, and a plugin's
    bad settings: one run of `check` lists them all (`serve` stops at the config's)."""
    path = write(
        tmp_path / "many.toml",
        '[server]\nport = "x"\nworkers = 0\n'
        '[plugins]\nenabled = ["example-notes"]\n[plugins.example-notes]\nmax_notes = "many"\n',
    )
    result = looping_cli("check", "--config", path)
    assert result.returncode == 1
    assert result.stderr == (
        f"{path}: 4 startup problems:\n"
        "  - expected an integer, got string @ $.server.port\n"
        "  - workers must be between 1 and 64, got 0 @ $.server.workers\n"
        "  - the signing key is read from the environment variable A2A_SIGNING_KEY, which is not "
        "set; generate one with `looping keys` and export it @ $.security.signing_key\n"
        f"  - plugin 'example-notes' (looping-plugins-example 0.1.0): invalid settings in {path}: "
        "expected an integer, got string @ $.plugins.example-notes.max_notes\n"
    )
    served = looping_cli("serve", "--config", path)
    assert served.returncode == 1
    assert served.stderr.startswith(f"{path}: 2 config problems:\n")


def test_check_without_a_config_file_says_how_to_give_one(looping_cli: Cli, tmp_path: Path) -> None:
    result = looping_cli("check", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        "looping.toml: 1 config problem:\n"
        "  - file not found; pass --config PATH or set LOOPING_CONFIG @ $\n"
    )


def test_check_reports_all_plugin_problems_and_never_imports_unselected_ones(
    looping_cli: Cli, plugin_site: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "broken-was-imported"
    path = write(
        tmp_path / "plugins.toml",
        '[plugins]\nenabled = ["good", "future", "twin", "needs-secret"]\n'
        '[plugins.needs-secret]\napi_key = "env:LPT_API_KEY"\n',
    )
    result = looping_cli(
        "check", "--config", path, site=plugin_site, env={"LPT_IMPORT_MARKER": str(marker), **KEY}
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"{path}: 3 startup problems:"
    assert lines[1].startswith("  - plugin 'future' (lpt-bad 2.0.0): targets plugin contract")
    assert lines[2].startswith("  - plugin 'twin': is provided by 2 distributions")
    assert lines[3].endswith("LPT_API_KEY, which is not set; export LPT_API_KEY before starting.")
    assert not marker.exists(), "an installed but unselected plugin was imported"


def test_selecting_the_broken_plugin_does_import_it(
    looping_cli: Cli, plugin_site: Path, tmp_path: Path
) -> None:
    # The control for the test above: the marker does appear when the plugin is selected.
    marker = tmp_path / "broken-was-imported"
    path = write(tmp_path / "plugins.toml", '[plugins]\nenabled = ["broken"]\n')
    result = looping_cli(
        "check", "--config", path, site=plugin_site, env={"LPT_IMPORT_MARKER": str(marker)}
    )
    assert result.returncode == 1
    assert marker.exists()
    assert "ModuleNotFoundError: No module named 'lpt_missing_dependency'" in result.stderr


def test_plugins_list_marks_selected_ones(looping_cli: Cli) -> None:
    result = looping_cli("plugins", "list", "--config", EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert "* example-gates  looping-plugins-example 0.1.0  contract 3\n" in result.stdout
    assert "    hooks: contract_version, plugin_info, stores, subtask_types, tool_families\n" in (
        result.stdout
    )


def test_plugins_list_survives_a_plugin_that_cannot_be_imported(
    looping_cli: Cli, plugin_site: Path, tmp_path: Path
) -> None:
    result = looping_cli("plugins", "list", "--json", site=plugin_site, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)["plugins"]
    rows = {row["key"]: row for row in listing}
    assert rows["broken"]["error"] == (
        "import failed: ModuleNotFoundError: No module named 'lpt_missing_dependency'"
    )
    assert rows["broken"]["contract_version"] is None
    assert rows["future"]["contract_version"] == 4
    assert [row["distribution"] for row in listing if row["key"] == "twin"] == [
        "lpt-twin-a",
        "lpt-twin-b",
    ]
    assert not any(row["selected"] for row in rows.values())


def test_plugins_list_with_a_broken_config_is_a_clean_error(
    looping_cli: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path / "bad.toml", "[plugins]\nenabled = 3\n")
    result = looping_cli("plugins", "list", "--config", path)
    assert result.returncode == 1
    assert result.stderr == (
        f"{path}: 1 config problem:\n  - expected a list of plugin keys @ $.plugins.enabled\n"
    )


def test_check_imports_each_tenants_agent(looping_cli: Cli, tmp_path: Path) -> None:
    path = write(
        tmp_path / "agents.toml",
        '[tenants.t]\nagent = "no_such_module:Agent"\n'
        '[tenants.t.card]\nname = "T"\ndescription = "T."\n'
        'skills = [{ id = "s", name = "S", description = "S.", tags = ["s"] }]\n',
    )
    result = looping_cli("check", "--config", path, env=KEY)
    assert result.returncode == 1
    assert result.stderr == (
        f"{path}: 1 startup problem:\n"
        "  - tenants.t.agent: cannot import 'no_such_module' (ModuleNotFoundError: No module named "
        "'no_such_module'); install the distribution that provides it, put it in "
        f"{Path(path).resolve().parent}, or fix the module path\n"
    )


def test_check_finds_what_serve_would_refuse_all_at_once(looping_cli: Cli, tmp_path: Path) -> None:
    """No key, a store no driver opens, an agent that cannot be imported: one run, every one."""
    path = write(
        tmp_path / "serve.toml",
        '[store]\nurl = "mysql://db.example/agents"\n'
        + TENANT.replace("WordCountAgent", "WordCounter"),
    )
    result = looping_cli("check", "--config", path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"{path}: 3 startup problems:"
    assert lines[1] == (
        "  - the signing key is read from the environment variable A2A_SIGNING_KEY, which is not "
        "set; generate one with `looping keys` and export it @ $.security.signing_key"
    )
    assert lines[2] == (
        "  - [store] url must start with sqlite:/// or postgresql://, got mysql: @ $.store.url"
    )
    assert lines[3] == (
        "  - tenants.t.agent: 'looping_plugins_example.agent' has no attribute 'WordCounter' (did "
        "you mean 'WordCountAgent'?); point it at your agent class"
    )


def test_check_refuses_a_key_that_is_not_an_ed25519_private_jwk(
    looping_cli: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path / "key.toml", TENANT)
    public = {k: v for k, v in json.loads(KEY["A2A_SIGNING_KEY"]).items() if k != "d"}
    for value, problem in (
        ("not json", "A2A_SIGNING_KEY does not hold a JSON Web Key (JSON)"),
        (json.dumps(public), "A2A_SIGNING_KEY: "),
        (json.dumps({"kty": "EC", "crv": "P-256"}), "A2A_SIGNING_KEY: "),
    ):
        result = looping_cli("check", "--config", path, env={"A2A_SIGNING_KEY": value})
        assert result.returncode == 1, value
        assert f"  - {problem}" in result.stderr, result.stderr
        assert value not in result.stderr or value == "not json"  # never echoes a key


def test_check_connect_shows_the_migration_state_or_one_line_why_not(
    looping_cli: Cli, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    path = write(tmp_path / "db.toml", f'[store]\nurl = "sqlite:///{store}"\n' + TENANT)
    result = looping_cli("check", "--config", path, "--connect", env=KEY)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(
        f"store: sqlite:///{store}: migrations pending 0001, "
    )
    assert looping_cli("db", "upgrade", "--config", path).returncode == 0
    again = looping_cli("check", "--config", path, "--connect", env=KEY)
    assert again.stdout.splitlines()[-1] == f"store: sqlite:///{store}: migrations up to date"
    # A PostgreSQL server that is not there: one line, the cause, no traceback.
    port = unused_port()
    nowhere = write(
        tmp_path / "pg.toml",
        f'[store]\nurl = "postgresql://looping@127.0.0.1:{port}/agents"\n' + TENANT,
    )
    refused = looping_cli("check", "--config", nowhere, "--connect", env=KEY)
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[1].startswith("  - cannot connect to the store: ")
    assert "Connection refused" in refused.stderr
    status = looping_cli("db", "status", "--config", nowhere)
    assert status.returncode == 1
    assert status.stderr.startswith("cannot connect to the store: ")
    assert len(status.stderr.splitlines()) == 1


def test_db_status_never_prints_a_password(looping_cli: Cli, tmp_path: Path) -> None:
    port = unused_port()
    path = write(
        tmp_path / "pw.toml", f'[store]\nurl = "postgresql://app:s3cret@127.0.0.1:{port}/a"\n'
    )
    result = looping_cli("db", "status", "--config", path)
    assert "s3cret" not in result.stdout + result.stderr


def test_db_status_and_upgrade(looping_cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path / "db.toml", f'[store]\nurl = "sqlite:///{tmp_path / "store.db"}"\n')
    before = looping_cli("db", "status", "--config", path)
    assert "  pending  0001  tasks, messages, artifacts, push\n" in before.stdout
    upgraded = looping_cli("db", "upgrade", "--config", path)
    assert upgraded.stdout == (
        "applied 0001  tasks, messages, artifacts, push\n"
        "applied 0002  owners (node, worker slot) of tasks and queued pushes\n"
        "applied 0003  sessions and their messages\n"
        "applied 0004  task metadata\n"
        "applied 0005  follow-ups to a running turn\n"
        "applied 0006  subtasks of delegation plans\n"
        "applied 0007  task events for streaming, and message answers\n"
        "applied 0008  trace context of queued pushes\n"
        "applied 0009  a finished turn's reply kept as its status message\n"
        "applied 0010  indexes another index already serves, dropped\n"
        "applied 0011  push configs' secrets sealed at rest, by key\n"
        "applied 0012  unsettled tasks by caller, for the turn limits\n"
        "applied 0013  tool calls that wait for approval, and their decisions\n"
        "applied 0014  push configs' targets checked once, older releases' rows at first use\n"
        "applied 0015  what callers' turns cost per day, and subtasks' costs\n"
        "applied 0016  unsettled tasks counted newest first\n"
        "applied 0017  the last follow-up that joined each task's turn\n"
        "up to date\n"
    )
    after = looping_cli("db", "status", "--config", path)
    assert after.stdout.endswith(
        "  applied  0001\n  applied  0002\n  applied  0003\n  applied  0004\n  applied  0005\n"
        "  applied  0006\n  applied  0007\n  applied  0008\n  applied  0009\n  applied  0010\n"
        "  applied  0011\n  applied  0012\n  applied  0013\n  applied  0014\n  applied  0015\n"
        "  applied  0016\n  applied  0017\n"
        "up to date\n"
    )


async def test_db_rotate_secrets_seals_again_with_the_current_key(
    looping_cli: Cli, tmp_path: Path
) -> None:
    """A push config sealed with an old key: with it named in previous_secrets_keys, the
    command seals it with the new one; a key the store was never sealed with is refused."""
    old, new, other = "o" * 40, "n" * 40, "x" * 40
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    database = Database.from_url(store_url)
    try:
        await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
        store = TaskStore(database, secrets=PushSecrets(old.encode()))
        config = TaskPushNotificationConfig(url="https://gateway.example/push", token="t" * 20)
        identity = Identity(tenant="t", issuer="https://gw.example", subject="alice")
        message = Message(message_id="m", role=Role.ROLE_USER, parts=(Part(text="hi"),))
        await store.start_turn(identity, message, config)
    finally:
        database.close()
    env = {
        "A2A_SIGNING_KEY": json.dumps(ed25519_private_jwk("k")),
        "OLD_KEY": old, "NEW_KEY": new, "OTHER_KEY": other,
    }  # fmt: skip
    rotating = write(
        tmp_path / "rotating.toml",
        f'[store]\nurl = "{store_url}"\nsecrets_key = "env:NEW_KEY"\n'
        'previous_secrets_keys = ["env:OLD_KEY"]\n',
    )
    new_id = PushSecrets(new.encode()).current_id
    done = looping_cli("db", "rotate-secrets", "--config", rotating, env=env)
    assert done.stdout == f"sealed the secrets of 1 push config(s) with key {new_id}\n"
    again = looping_cli("db", "rotate-secrets", "--config", rotating, env=env)
    assert again.stdout == f"sealed the secrets of 0 push config(s) with key {new_id}\n"
    wrong = write(
        tmp_path / "wrong.toml", f'[store]\nurl = "{store_url}"\nsecrets_key = "env:OTHER_KEY"\n'
    )
    refused = looping_cli("db", "rotate-secrets", "--config", wrong, env=env)
    assert refused.returncode == 1
    assert f"sealed with key {new_id}, which this server does not have" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_db_adopt_takes_a_gone_nodes_unfinished_turns(looping_cli: Cli, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    path = write(
        tmp_path / "db.toml", f'[server]\nworkers = 2\n[store]\nurl = "sqlite:///{store}"\n'
    )
    assert looping_cli("db", "upgrade", "--config", path).returncode == 0
    with sqlite3.connect(store) as connection:
        for task_id, state, node, worker in [
            ("running", 2, "gone", 3), ("done", 3, "gone", 3), ("other", 2, "alive", 0),
        ]:  # fmt: skip
            connection.execute(
                "INSERT INTO tasks (id, tenant, issuer, subject, context_id, state, status_ts,"
                " created_ts, node, worker) VALUES (?, 't', 'i', 's', 'c', ?, 0, 0, ?, ?)",
                (task_id, state, node, worker),
            )
        connection.execute(
            "INSERT INTO push_outbox (task_id, config_id, jti, url, body, state, attempts,"
            " next_attempt_ts, created_ts, node, worker)"
            " VALUES ('done', 'c', 'j', 'https://g/p', '{}', 'pending', 0, 0, 0, 'gone', 3)"
        )

    result = looping_cli("db", "adopt", "gone", "--config", path)

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "node 'local' took 1 unfinished task(s) and 1 pending push(es) from node 'gone'\n"
        "restart this node's server to resume or fail those turns (on_restart)\n"
    )
    with sqlite3.connect(store) as connection:
        owners = dict(
            (task_id, (node, worker))
            for task_id, node, worker in connection.execute("SELECT id, node, worker FROM tasks")
        )
        outbox = connection.execute("SELECT node, worker FROM push_outbox").fetchall()
    assert owners == {"running": ("local", 1), "done": ("gone", 3), "other": ("alive", 0)}
    assert outbox == [("local", 1)]


def test_db_adopt_refuses_its_own_node_and_an_old_store(looping_cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path / "db.toml", f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n')
    own = looping_cli("db", "adopt", "local", "--config", path)
    assert own.returncode == 1
    assert own.stderr == (
        "node 'local' is this server's own node; its turns are recovered when it starts\n"
    )
    old = looping_cli("db", "adopt", "gone", "--config", path)
    assert old.returncode == 1
    assert old.stderr == "the store has pending migrations; run `looping db upgrade` first\n"


def test_a_relative_sqlite_path_is_the_config_files_and_looking_creates_nothing(
    looping_cli: Cli, tmp_path: Path
) -> None:
    folder, elsewhere = tmp_path / "deploy", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    path = write(folder / "looping.toml", '[store]\nurl = "sqlite:///state/looping.db"\n' + TENANT)
    status = looping_cli("db", "status", "--config", path, cwd=elsewhere)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[:3] == [
        f"store: sqlite:///{folder}/state/looping.db",
        "  no database yet: `looping serve` or `looping db upgrade` creates it",
        "  pending  0001  tasks, messages, artifacts, push",
    ]
    checked = looping_cli("check", "--config", path, "--connect", env=KEY, cwd=elsewhere)
    assert checked.returncode == 0, checked.stderr
    assert not (folder / "state").exists()  # neither looking created it
    assert list(elsewhere.iterdir()) == []
    assert looping_cli("db", "upgrade", "--config", path, cwd=elsewhere).returncode == 0
    assert (folder / "state" / "looping.db").exists()
    assert list(elsewhere.iterdir()) == []


def test_a_store_url_with_a_password_is_refused_and_env_urls_are_read_when_used(
    looping_cli: Cli, tmp_path: Path
) -> None:
    inline = write(
        tmp_path / "inline.toml", '[store]\nurl = "postgresql://app:s3cret@db.example/agents"\n'
    )
    refused = looping_cli("db", "status", "--config", inline)
    assert refused.returncode == 1
    assert "s3cret" not in refused.stderr
    assert (
        "a password in the store URL is a secret written inline; put the whole URL in an "
        'environment variable and write url = "env:DATABASE_URL" @ $.store.url'
    ) in refused.stderr
    indirect = write(tmp_path / "env.toml", '[store]\nurl = "env:LPT_DATABASE_URL"\n')
    unset = looping_cli("db", "upgrade", "--config", indirect)
    assert unset.returncode == 1
    assert unset.stderr == (
        "[store] url is read from the environment variable LPT_DATABASE_URL, which is not set; "
        "export it before starting\n"
    )
    store = tmp_path / "from-env.db"
    env = {"LPT_DATABASE_URL": f"sqlite:///{store}"}
    assert looping_cli("db", "upgrade", "--config", indirect, env=env).returncode == 0
    status = looping_cli("db", "status", "--config", indirect, env=env)
    assert status.stdout.splitlines()[0] == "store: env:LPT_DATABASE_URL"
    assert status.stdout.splitlines()[-1] == "up to date"


def test_check_lists_every_tenants_agent_and_model_problem_in_one_run(
    looping_cli: Cli, tmp_path: Path
) -> None:
    second = TENANT.replace("[tenants.t]", "[tenants.u]").replace(
        "[tenants.t.card]", "[tenants.u.card]"
    )
    path = write(
        tmp_path / "agents.toml",
        TENANT.replace("WordCountAgent", "WordCounter")
        + second.replace("looping_plugins_example.agent", "no_such_module")
        + '[tenants.t.model]\nmodel = "m"\nprovider = "nowhere"\n',
    )
    result = looping_cli("check", "--config", path, env=KEY)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == f"{path}: 3 startup problems:"
    assert lines[1].startswith("  - tenants.t.model.provider: no model provider 'nowhere'")
    assert lines[2].startswith("  - tenants.t.agent: 'looping_plugins_example.agent' has no ")
    assert lines[3].startswith("  - tenants.u.agent: cannot import 'no_such_module'")


def test_check_and_serve_name_the_extra_that_metrics_and_traces_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run in this process, with the packages made to look missing (they are installed here)."""
    from click.testing import CliRunner  # noqa: PLC0415

    from looping_core import cli  # noqa: PLC0415
    from looping_core.server import _telemetry  # noqa: PLC0415

    monkeypatch.setattr(_telemetry, "_installed", lambda module: False)
    path = write(
        tmp_path / "observed.toml",
        "[observability]\nmetrics_port = 9464\n"
        'traces_endpoint = "http://127.0.0.1:4318/v1/traces"\n' + TENANT,
    )
    # stderr apart: click 8.2 and later always; 8.1 (the floor) when asked for.
    separate = "mix_stderr" in inspect.signature(CliRunner).parameters
    runner = CliRunner(**({"mix_stderr": False} if separate else {}))
    checked = runner.invoke(cli.main, ["check", "--config", path], env=KEY)
    served = runner.invoke(cli.main, ["serve", "--config", path], env=KEY)
    assert checked.exit_code == served.exit_code == 1
    lines = checked.stderr.splitlines()
    assert lines[0] == f"{path}: 2 startup problems:"
    assert lines[1:] == [
        "  - metrics_port needs prometheus-client, which is not installed; install it with "
        "pip install 'looping-core[prometheus]' @ $.observability.metrics_port",
        "  - traces_endpoint needs the OpenTelemetry SDK and its OTLP exporter, which are not "
        "installed; install them with pip install 'looping-core[otel]' "
        "@ $.observability.traces_endpoint",
    ]
    assert "metrics_port needs prometheus-client" in served.stderr
    assert "traces_endpoint needs the OpenTelemetry SDK" in served.stderr
    assert not (tmp_path / "looping.db").exists()  # refused before the store was opened


def test_the_job_engine_tables_are_applied_by_upgrade_shown_by_status_and_required_by_worker(
    looping_cli: Cli, tmp_path: Path, postgres_url: str
) -> None:
    path = write(tmp_path / "pg.toml", f'[store]\nurl = "{postgres_url}"\n' + TENANT)
    refused = looping_cli("worker", "--config", path, env=KEY)
    assert refused.returncode == 1
    assert refused.stderr == (
        "the store is not up to date (core migrations or the job engine's tables); run "
        "`looping db upgrade` (or start `looping serve`) first: a worker never migrates\n"
    )
    before = looping_cli("db", "status", "--config", path)
    assert (
        "  pending  jobs schema (procrastinate)\n"
        "  pending  jobs index on open jobs' locks (looping-core)\n"
        "  pending  jobs fetch planned in queue order (looping-core)\n"
    ) in before.stdout
    upgraded = looping_cli("db", "upgrade", "--config", path)
    assert (
        "applied jobs schema (procrastinate)\n"
        "applied jobs index on open jobs' locks (looping-core)\n"
        "applied jobs fetch planned in queue order (looping-core)\nup to date\n"
    ) in upgraded.stdout
    after = looping_cli("db", "status", "--config", path)
    assert re.search(
        r"\n  jobs     \d\d\.\d\d\.\d\d_\w+ \(procrastinate\)\nup to date\n$", after.stdout
    )
    again = looping_cli("db", "upgrade", "--config", path)
    assert again.stdout == "up to date\n"  # nothing to apply twice
    unknown = looping_cli("worker", "--config", path, "--queues", "looping-turns,mail", env=KEY)
    assert unknown.returncode == 1
    assert unknown.stderr == (
        "no job queue named mail; the queues are looping-turns, looping-pushes, looping-sweeps\n"
    )


def test_looping_worker_says_when_there_is_no_job_engine(looping_cli: Cli, tmp_path: Path) -> None:
    path = write(
        tmp_path / "lite.toml", f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n' + TENANT
    )
    result = looping_cli("worker", "--config", path, env=KEY)
    assert result.returncode == 1
    assert result.stderr == (
        "looping worker runs the job engine's jobs, and this config has none: its store is "
        "SQLite (or [runner] engine is embedded), where `looping serve` runs every turn\n"
    )
    assert not (tmp_path / "s.db").exists()


def test_db_adopt_has_nothing_to_do_with_the_job_engine(
    looping_cli: Cli, tmp_path: Path, postgres_url: str
) -> None:
    path = write(tmp_path / "pg.toml", f'[store]\nurl = "{postgres_url}"\n')
    result = looping_cli("db", "adopt", "gone", "--config", path)
    assert result.returncode == 1
    assert "a dead machine's jobs are taken up by the other workers by themselves" in result.stderr
