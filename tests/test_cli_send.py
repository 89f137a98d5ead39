"""`looping gateway`, `looping send` and `looping tasks` against a real `looping serve`: a
newcomer's first turn with no file edited by hand, and what a refusal looks like."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from looping_core.a2a import generate_signing_key
from looping_core.a2a._jose import b64url_decode
from looping_core.config import load_config
from looping_core.testing import config_toml, tenant_toml

from support.ports import unused_port, unused_ports
from support.processes import start_looping, stop, wait_for_url

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

Cli = Callable[..., subprocess.CompletedProcess[str]]
KEY = {"LPT_SEND_KEY": json.dumps(generate_signing_key("agent-key"))}


def write_config(
    folder: Path, port: int, gateway_port: int, origins: str | None = None, server: str = ""
) -> Path:
    path = folder / "looping.toml"
    path.write_text(
        config_toml(
            port=port,
            server=server,
            gateway_origins=json.loads(origins or f'["http://127.0.0.1:{gateway_port}"]'),
            signing_key_env="LPT_SEND_KEY",
            store_url=f"sqlite:///{folder / 'looping.db'}",
            extra=tenant_toml("words", "looping_plugins_example.agent:WordCountAgent"),
        )
    )
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """`looping serve` on a fresh config; yields the config and the gateway's port."""
    port, gateway_port = unused_ports(2)
    config = write_config(tmp_path, port, gateway_port)
    log = tmp_path / "serve.log"
    process = start_looping("serve", "--config", str(config), env=KEY, log=log)
    try:
        wait_for_url(f"http://127.0.0.1:{port}/.well-known/jwks.json", process, log)
        yield config, gateway_port
    finally:
        stop(process)


def test_send_prints_the_answer_and_tasks_finds_the_task(
    looping_cli: Cli, served: tuple[Path, int], tmp_path: Path
) -> None:
    config, _ = served
    state = ["--state", str(tmp_path / "state")]
    sent = looping_cli(
        "send", "--config", str(config), *state, "--tenant", "words", "one two three"
    )
    assert sent.returncode == 0, sent.stderr
    head, reply, artifact = sent.stdout.splitlines()
    assert head.startswith("TASK_STATE_COMPLETED  task ")
    assert (reply, artifact) == ("Counted 3 words.", "[word-count] 3")
    task_id = head.split()[2]
    key = json.loads((tmp_path / "state" / "gateway-key.json").read_text())
    assert "d" in key  # the gateway's own private key, kept in its state folder
    assert oct((tmp_path / "state" / "gateway-key.json").stat().st_mode & 0o777) == "0o600"

    as_json = looping_cli(
        "send", "--config", str(config), *state, "--tenant", "words", "--json", "x y"
    )
    assert json.loads(as_json.stdout)["artifacts"][0]["parts"] == [{"text": "2"}]
    got = looping_cli("tasks", "get", task_id, "--config", str(config), *state, "--tenant", "words")
    assert json.loads(got.stdout)["id"] == task_id
    listed = looping_cli("tasks", "list", "--config", str(config), *state, "--tenant", "words")
    assert task_id in [task["id"] for task in json.loads(listed.stdout)["tasks"]]
    done = looping_cli(
        "tasks", "cancel", task_id, "--config", str(config), *state, "--tenant", "words"
    )
    assert done.returncode == 1  # a completed task cannot be canceled
    assert "the agent refused" in done.stderr


def test_send_reads_stdin_and_works_beside_a_running_gateway(
    looping_cli: Cli, served: tuple[Path, int], tmp_path: Path
) -> None:
    config, gateway_port = served
    state = ["--state", str(tmp_path / "state")]
    log = tmp_path / "gateway.log"
    gateway = start_looping("gateway", "--config", str(config), *state, env={}, log=log)
    try:
        wait_for_url(f"http://127.0.0.1:{gateway_port}/.well-known/jwks.json", gateway, log)
        script = str(Path(sys.executable).with_name("looping"))
        sent = subprocess.run(
            [script, "send", "--config", str(config), *state, "--tenant", "words"],
            input="four words from stdin",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        assert "Counted 4 words." in sent.stdout.splitlines()
        # The agent's push went to the standing gateway, which took it: the credentials `send`
        # gave are the ones it expects (they come from the same key), not refused 401 and
        # retried for a day.
        attempts = _push_attempts(tmp_path / "looping.db")
    finally:
        stop(gateway)
    assert attempts == [("delivered", 200)], attempts


def _push_attempts(database: Path, timeout: float = 15.0) -> list[tuple[str, int | None]]:
    """Every delivery attempt of the agent's pushes and its outbox state, once none is
    pending."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.closing(sqlite3.connect(database)) as connection:
            rows = connection.execute(
                "SELECT o.state, a.status FROM push_outbox o"
                " LEFT JOIN push_attempts a ON a.outbox_id = o.id ORDER BY a.id"
            ).fetchall()
        if rows and all(state != "pending" for state, _ in rows):
            return [(state, status) for state, status in rows]
        if time.monotonic() > deadline:
            return [(state, status) for state, status in rows]
        time.sleep(0.1)


def test_a_refused_token_exits_non_zero_naming_the_check(
    looping_cli: Cli, served: tuple[Path, int], tmp_path: Path
) -> None:
    """Another key serves the trusted origin's JWKS: the agent refuses `send`'s token."""
    config, gateway_port = served
    log = tmp_path / "gateway.log"
    other = ["--state", str(tmp_path / "other")]
    gateway = start_looping("gateway", "--config", str(config), *other, env={}, log=log)
    try:
        wait_for_url(f"http://127.0.0.1:{gateway_port}/.well-known/jwks.json", gateway, log)
        sent = looping_cli(
            "send", "--config", str(config), "--state", str(tmp_path / "mine"),
            "--tenant", "words", "hi",
        )  # fmt: skip
    finally:
        stop(gateway)
    assert sent.returncode == 1
    assert "Gateway token rejected" in sent.stderr
    assert "(check: " in sent.stderr


def test_a_config_that_trusts_no_loopback_gateway_says_so(looping_cli: Cli, tmp_path: Path) -> None:
    config = write_config(tmp_path, 8080, 9000, origins='["https://gateway.example"]')
    result = looping_cli("send", "--config", str(config), "--tenant", "words", "hi")
    assert result.returncode == 1
    assert "trusts no loopback origin" in result.stderr
    assert "http://127.0.0.1:9000" in result.stderr


@pytest.mark.parametrize(("binding", "transport"), [("jsonrpc", "JSONRPC"), ("rest", "HTTP+JSON")])
def test_the_docs_sdk_recipe_runs_as_written(
    looping_cli: Cli, tmp_path: Path, binding: str, transport: str
) -> None:
    """The first-turn tutorial's official-SDK recipe against the example config (its ports
    moved to free ones): `looping gateway`, `looping token`, then the recipe's code, unchanged
    otherwise; on the SDK's JSON-RPC transport and on its REST one (a token `--binding rest`)."""
    root = Path(__file__).parent.parent
    tutorial = (root / "docs" / "first-turn.md").read_text()
    recipe = tutorial.split("<!-- sdk-recipe -->\n```python\n", 1)[1].split("```", 1)[0]
    port, gateway_port = unused_ports(2)
    example = (root / "examples/looping.toml").read_text()
    config = tmp_path / "looping.toml"
    config.write_text(example.replace("8080", str(port)).replace("9000", str(gateway_port)))
    state = ["--state", str(tmp_path / "state")]
    env = {"A2A_SIGNING_KEY": KEY["LPT_SEND_KEY"]}
    serve_log, gateway_log = tmp_path / "serve.log", tmp_path / "gateway.log"
    serving = start_looping("serve", "--config", str(config), env=env, log=serve_log, cwd=tmp_path)
    gateway = start_looping("gateway", "--config", str(config), *state, env={}, log=gateway_log)
    try:
        wait_for_url(f"http://127.0.0.1:{port}/.well-known/jwks.json", serving, serve_log)
        wait_for_url(f"http://127.0.0.1:{gateway_port}/.well-known/jwks.json", gateway, gateway_log)
        token = looping_cli(
            "token", "--config", str(config), *state, "--tenant", "words", "--binding", binding
        )
        assert token.returncode == 0, token.stderr
        code = recipe.replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
        run = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "TOKEN": token.stdout.strip(), "A2A_BINDING": transport},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        stop(gateway)
        stop(serving)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "3"


def test_send_answers_a_task_that_asked_for_input(looping_cli: Cli, tmp_path: Path) -> None:
    port, gateway_port = unused_ports(2)
    config = write_config(tmp_path, port, gateway_port)
    config.write_text(
        config.read_text().replace(
            "looping_plugins_example.agent:WordCountAgent", "support.agents:EchoAgent"
        )
    )
    agents = str(Path(__file__).parent)  # support.agents
    log = tmp_path / "serve.log"
    process = start_looping(
        "serve", "--config", str(config), env={**KEY, "PYTHONPATH": agents}, log=log
    )
    state = ["--state", str(tmp_path / "state")]
    try:
        wait_for_url(f"http://127.0.0.1:{port}/.well-known/jwks.json", process, log)
        asked = looping_cli("send", "--config", str(config), *state, "--tenant", "words", "ask")
        assert asked.returncode == 0, asked.stderr
        head, question = asked.stdout.splitlines()
        assert head.startswith("TASK_STATE_INPUT_REQUIRED  task ")
        assert question == "which one?"
        task_id = head.split()[2]
        answered = looping_cli(
            "send", "--config", str(config), *state, "--tenant", "words",
            "--task", task_id, "the blue one",
        )  # fmt: skip
    finally:
        stop(process)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.splitlines()[0].startswith(f"TASK_STATE_COMPLETED  task {task_id}")
    assert "[echo] the blue one (after 2)" in answered.stdout.splitlines()


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """`looping serve` with the paying tenant (its model `looping model serve`d); yields the
    config and the `--state` arguments."""
    port, gateway_port, model_port = unused_port(), unused_port(), unused_port()
    config = write_config(tmp_path, port, gateway_port)
    model = f'[tenants.payer.model]\nmodel = "m"\nbase_url = "http://127.0.0.1:{model_port}/v1"\n'
    config.write_text(
        config.read_text() + tenant_toml("payer", "support.agents:PayingAgent") + model
    )
    env = {**KEY, "PYTHONPATH": str(Path(__file__).parent)}  # support.agents
    log = tmp_path / "serve.log"
    models = start_looping(
        "model", "serve", "--port", str(model_port), "--model", "support.payer_model:model",
        env=env, log=tmp_path / "model.log",
    )  # fmt: skip
    process = start_looping("serve", "--config", str(config), env=env, log=log)
    try:
        wait_for_url(f"http://127.0.0.1:{port}/.well-known/jwks.json", process, log)
        wait_for_url(f"http://127.0.0.1:{model_port}/v1/models", models, tmp_path / "model.log")
        yield config, ["--config", str(config), "--state", str(tmp_path / "state")]
    finally:
        stop(process)
        stop(models)


def test_send_shows_the_calls_that_wait_and_answers_them(
    looping_cli: Cli, paying: tuple[Path, list[str]]
) -> None:
    _, options = paying
    asked = looping_cli("send", *options, "--tenant", "payer", "pay bob")
    assert asked.returncode == 0, asked.stderr
    head, waiting = asked.stdout.splitlines()
    assert head.startswith("TASK_STATE_INPUT_REQUIRED  task ")
    task_id = head.split()[2]
    call_id = waiting.split()[3]
    assert waiting == f'waits for approval: {call_id}  pay {{"amount": 250, "to": "bob"}}'
    assert asked.stderr.strip() == (
        f"answer with: looping send --tenant payer --task {task_id} --approve CALL_ID (or "
        "--deny CALL_ID --reason ...; 'all' for every call)"
    )
    wrong = looping_cli(
        "send", *options, "--tenant", "payer", "--task", task_id, "--approve", "call_nope"
    )
    assert wrong.returncode == 2
    assert f"the task waits for no call call_nope (it waits for {call_id})" in wrong.stderr
    approved = looping_cli(
        "send", *options, "--tenant", "payer", "--task", task_id, "--approve", "all"
    )
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines()[0].startswith(f"TASK_STATE_COMPLETED  task {task_id}")
    assert "[answer] paid 250 to bob" in approved.stdout.splitlines()


def test_send_in_a_terminal_asks_about_each_call(paying: tuple[Path, list[str]]) -> None:
    _, options = paying
    script = Path(sys.executable).with_name("looping")
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPING_")}
    process = subprocess.Popen(
        [str(script), "send", *options, "--tenant", "payer", "pay bob"],
        stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    seen = b""
    answers = iter([b"n\n", b"not today\n"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the other end closed: the command ended
                    break
                seen += chunk
                # The prompt's last character is written just before the line is read (click
                # 8.1 writes it apart, with input(" ")): an answer typed before it would be
                # echoed ahead of it.
                if seen.endswith((b"[y/N]: ", b"(optional): ")):
                    os.write(leader, next(answers))
            elif process.poll() is not None:
                break
        assert process.wait(timeout=30) == 0, seen.decode()
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    said = seen.decode().replace("\r\n", "\n")
    assert 'Approve pay {"amount": 250, "to": "bob"}? [y/N]: n' in said
    assert "TASK_STATE_COMPLETED" in said
    assert "[answer] not run: denied by the caller (not today)" in said


def test_both_bindings_from_the_cli(
    looping_cli: Cli, served: tuple[Path, int], tmp_path: Path
) -> None:
    """`--binding rest`: send, tasks and token speak the HTTP+JSON binding, whose tokens are
    for its own URL; a JSON-RPC token is refused there (audience-mismatch)."""
    config, _ = served
    state = ["--state", str(tmp_path / "state")]
    rest = ["--binding", "rest"]
    sent = looping_cli(
        "send", "--config", str(config), *state, "--tenant", "words", *rest, "--json", "a b c d"
    )
    assert sent.returncode == 0, sent.stderr
    task = json.loads(sent.stdout)
    assert task["artifacts"][0]["parts"] == [{"text": "4"}]
    got = looping_cli(
        "tasks", "get", task["id"], "--config", str(config), *state, "--tenant", "words", *rest
    )
    assert json.loads(got.stdout)["id"] == task["id"]
    listed = looping_cli("tasks", "list", "--config", str(config), *state, "--tenant", "words",
                         *rest)  # fmt: skip
    assert task["id"] in [t["id"] for t in json.loads(listed.stdout)["tasks"]]
    refused = looping_cli(
        "tasks", "cancel", task["id"], "--config", str(config), *state, "--tenant", "words", *rest
    )
    assert refused.returncode == 1
    assert "the agent refused" in refused.stderr

    url = f"{load_config(config).server.rest_url}/words/tasks/{task['id']}"
    gateway = start_looping(
        "gateway", "--config", str(config), *state, env={}, log=tmp_path / "gw.log"
    )
    try:
        gateway_port = served[1]
        wait_for_url(f"http://127.0.0.1:{gateway_port}/.well-known/jwks.json", gateway,
                  tmp_path / "gw.log")  # fmt: skip
        for binding, status in (("rest", 200), ("jsonrpc", 401)):
            minted = looping_cli("token", "--config", str(config), *state, "--tenant", "words",
                                 "--binding", binding, "--lifetime", "120")  # fmt: skip
            token = minted.stdout.strip()
            assert "\n" not in token  # the token alone on stdout; when it ends, on stderr
            assert minted.stderr.startswith("valid for 120 s (until ")
            request = urllib.request.Request(
                url, headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
            )
            challenge = ""
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    answered = response.status
            except urllib.error.HTTPError as error:
                answered, challenge = error.code, error.headers["WWW-Authenticate"]
            assert answered == status, binding
            assert ("audience-mismatch" in challenge) == (status == 401)
    finally:
        stop(gateway)


def test_send_waits_for_an_agent_that_is_still_starting(tmp_path: Path) -> None:
    port, gateway_port = unused_ports(2)
    config = write_config(tmp_path, port, gateway_port)
    script = str(Path(sys.executable).with_name("looping"))
    sender = subprocess.Popen(
        [script, "send", "--config", str(config), "--state", str(tmp_path / "state"),
         "--tenant", "words", "early words"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)  # the send is waiting for the agent by now
    log = tmp_path / "serve.log"
    server = start_looping("serve", "--config", str(config), env=KEY, log=log)
    try:
        out, err = sender.communicate(timeout=60)
    finally:
        stop(server)
    assert sender.returncode == 0, err
    assert "Counted 2 words." in out.splitlines()


def test_the_gateway_stops_on_sigint_even_when_started_with_it_ignored(tmp_path: Path) -> None:
    """A shell starts a background job with SIGINT ignored, and Python then never raises
    KeyboardInterrupt: the gateway handles SIGINT and SIGTERM itself."""
    gateway_port = unused_port()
    config = write_config(tmp_path, unused_port(), gateway_port)
    script = str(Path(sys.executable).with_name("looping"))
    for signum in (signal.SIGINT, signal.SIGTERM):
        log = tmp_path / f"gateway-{signum}.log"
        with log.open("ab") as output:
            gateway = subprocess.Popen(
                [script, "gateway", "--config", str(config), "--state", str(tmp_path / "s")],
                stdout=output, stderr=output,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
            )  # fmt: skip
        wait_for_url(f"http://127.0.0.1:{gateway_port}/.well-known/jwks.json", gateway, log)
        gateway.send_signal(signum)
        try:
            assert gateway.wait(timeout=10) == 0, log.read_text()
        finally:
            if gateway.poll() is None:
                gateway.kill()


def test_the_console_is_served_beside_the_gateway_and_only_to_its_token(
    served: tuple[Path, int], tmp_path: Path
) -> None:
    """`looping gateway --console` prints the page's URL with its token; the page's API answers
    that token only, lists the agent's verified cards, and says how to turn inspection on."""
    config, gateway_port = served
    log = tmp_path / "gateway.log"
    gateway = start_looping(
        "gateway", "--config", str(config), "--state", str(tmp_path / "s"), "--console",
        env={}, log=log,
    )  # fmt: skip
    try:
        wait_for_url(f"http://127.0.0.1:{gateway_port}/.well-known/jwks.json", gateway, log)
        for _ in range(100):
            printed = [line for line in log.read_text().splitlines() if "console: " in line]
            if printed:
                break
            time.sleep(0.05)
        url = printed[0].split("console: ", 1)[1]
        page, _, fragment = url.partition("#token=")
        assert page == f"http://127.0.0.1:{gateway_port}/console/"
        api = page + "api/agents"
        with urllib.request.urlopen(page, timeout=10) as served_page:
            assert b"console.js" in served_page.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(api, timeout=10)
        assert refused.value.code == 403
        request = urllib.request.Request(api, headers={"X-Looping-Console": fragment})
        with urllib.request.urlopen(request, timeout=30) as answer:
            agents = json.loads(answer.read())["agents"]
    finally:
        stop(gateway)
    assert [(a["tenant"], a["signature"]["verified"]) for a in agents] == [("words", True)]
    assert "[server] inspection off" in log.read_text()


def test_a_turn_whose_model_did_not_answer_says_which_and_how_to_start_one(
    looping_cli: Cli, tmp_path: Path
) -> None:
    port, gateway_port, model_port = unused_port(), unused_port(), unused_port()
    config = write_config(tmp_path, port, gateway_port)
    text = config.read_text().replace(
        "looping_plugins_example.agent:WordCountAgent", "looping_plugins_example.agent:NotesKeeper"
    )
    text += (
        f'\n[tenants.words.model]\nmodel = "m"\nbase_url = "http://127.0.0.1:{model_port}/v1"\n'
        "max_retries = 0\n"
    )
    config.write_text('[plugins]\nenabled = ["example-notes"]\n' + text)
    log = tmp_path / "serve.log"
    process = start_looping("serve", "--config", str(config), env=KEY, log=log)
    try:
        wait_for_url(f"http://127.0.0.1:{port}/.well-known/jwks.json", process, log)
        sent = looping_cli(
            "send", "--config", str(config), "--state", str(tmp_path / "state"),
            "--tenant", "words", "hello",
        )  # fmt: skip
    finally:
        stop(process)
    assert sent.returncode == 1
    assert "(reason: MODEL_UNAVAILABLE)" in sent.stdout
    assert f"did not answer (http://127.0.0.1:{model_port}/v1)" in sent.stderr
    assert f"`looping model serve --port {model_port}`" in sent.stderr
    assert "[tenants.words.model] base_url" in sent.stderr


def test_the_grpc_binding_from_the_cli(looping_cli: Cli, tmp_path: Path) -> None:
    """`--binding grpc`: send, tasks and token speak gRPC to `[server] grpc_port`, with tokens
    for the gRPC address; an agent without gRPC is named as such."""
    port, gateway_port, grpc_port = unused_port(), unused_port(), unused_port()
    config = write_config(tmp_path, port, gateway_port, server=f"grpc_port = {grpc_port}")
    (tmp_path / "plain").mkdir()
    plain = write_config(tmp_path / "plain", port, gateway_port)
    log = tmp_path / "serve.log"
    process = start_looping("serve", "--config", str(config), env=KEY, log=log)
    state = ["--state", str(tmp_path / "state")]
    grpc = ["--binding", "grpc"]
    try:
        wait_for_url(f"http://127.0.0.1:{port}/.well-known/jwks.json", process, log)
        sent = looping_cli("send", "--config", str(config), *state, "--tenant", "words", *grpc,
                           "--json", "a b c")  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        task = json.loads(sent.stdout)
        assert task["artifacts"][0]["parts"] == [{"text": "3"}]
        got = looping_cli("tasks", "get", task["id"], "--config", str(config), *state,
                          "--tenant", "words", *grpc)  # fmt: skip
        assert json.loads(got.stdout)["id"] == task["id"]
        listed = looping_cli("tasks", "list", "--config", str(config), *state,
                             "--tenant", "words", *grpc)  # fmt: skip
        assert task["id"] in [t["id"] for t in json.loads(listed.stdout)["tasks"]]
        refused = looping_cli("tasks", "cancel", task["id"], "--config", str(config), *state,
                              "--tenant", "words", *grpc)  # fmt: skip
        assert refused.returncode == 1
        assert "the agent refused: Task cannot be canceled [9]" in refused.stderr
        minted = looping_cli("token", "--config", str(config), *state, "--tenant", "words",
                             *grpc, "--lifetime", "120")  # fmt: skip
        claims = json.loads(b64url_decode(minted.stdout.strip().split(".")[1]))
        assert claims["aud"] == f"127.0.0.1:{grpc_port}"
    finally:
        stop(process)
    without = looping_cli("tasks", "list", "--config", str(plain), *state, "--tenant", "words",
                          *grpc)  # fmt: skip
    assert without.returncode == 1
    assert "this agent serves no gRPC; set [server] grpc_port" in without.stderr
