"""`looping model serve`: a local model endpoint as a process, and the example config's
model-driven tenants answering offline through it, as the README says to run them."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from looping_core.a2a import generate_signing_key

from support.ports import unused_port, unused_ports
from support.processes import start_looping, stop, wait_for_url

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

Cli = Callable[..., subprocess.CompletedProcess[str]]
EXAMPLE = Path(__file__).parents[1] / "examples" / "looping.toml"


def _ask(port: int, text: str, tools: list[dict[str, object]] | None = None) -> object:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    with client:
        return client.chat.completions.create(
            model="llama3.2", messages=[{"role": "user", "content": text}], tools=tools or []
        )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_it_serves_until_a_signal_even_started_with_sigint_ignored(
    tmp_path: Path, signum: int
) -> None:
    """A shell starts a background job with SIGINT ignored: the endpoint handles it itself."""
    port = unused_port()
    log = tmp_path / "model.log"
    process = start_looping(
        "model", "serve", "--port", str(port), env={}, log=log,
        preexec=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # type: ignore[func-returns-value]
    )  # fmt: skip
    try:
        wait_for_url(f"http://127.0.0.1:{port}/v1/models", process, log)
        reply = _ask(port, "hello")
        assert reply.choices[0].message.content == "success (no tool calls)"  # type: ignore[attr-defined]
    finally:
        assert stop(process, signum) == 0, log.read_text()
    assert f"model endpoint http://127.0.0.1:{port}/v1 answering with test" in log.read_text()


def test_it_answers_from_the_model_a_module_names(tmp_path: Path) -> None:
    (tmp_path / "my_models.py").write_text(
        "def shout(request):\n    return request.messages[-1].content[0].text.upper()\n"
    )
    port = unused_port()
    log = tmp_path / "model.log"
    process = start_looping(
        "model", "serve", "--port", str(port), "--model", "my_models:shout",
        env={}, log=log, cwd=tmp_path,
    )  # fmt: skip
    try:
        wait_for_url(f"http://127.0.0.1:{port}/v1/models", process, log)
        assert _ask(port, "quiet").choices[0].message.content == "QUIET"  # type: ignore[attr-defined]
    finally:
        stop(process)


def test_a_port_in_use_or_a_wrong_model_is_one_line_and_exit_1(
    looping_cli: Cli, tmp_path: Path
) -> None:
    port = unused_port()
    log = tmp_path / "model.log"
    first = start_looping("model", "serve", "--port", str(port), env={}, log=log)
    try:
        wait_for_url(f"http://127.0.0.1:{port}/v1/models", first, log)
        busy = looping_cli("model", "serve", "--port", str(port))
    finally:
        stop(first)
    assert busy.returncode == 1
    assert busy.stderr.strip() == (
        f"127.0.0.1:{port} is in use (a model server, Ollama, or another `looping model serve`?); "
        "stop it or give --port"
    )
    wrong = looping_cli("model", "serve", "--port", str(port), "--model", "json:decoder")
    assert wrong.returncode == 1
    assert "--model 'json:decoder' is a module, not a chat model" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def _example_config(folder: Path, port: int, gateway_port: int, model_port: int) -> Path:
    """The example config as it is, but for its ports and its store (in `folder`)."""
    text = EXAMPLE.read_text()
    for old, new in (
        ("127.0.0.1:8080", f"127.0.0.1:{port}"),
        ("port = 8080", f"port = {port}"),
        ("127.0.0.1:9000", f"127.0.0.1:{gateway_port}"),
        ("127.0.0.1:11434", f"127.0.0.1:{model_port}"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    path = folder / "looping.toml"
    path.write_text(text)
    return path


def test_the_example_model_tenants_answer_offline_through_the_local_endpoint(
    looping_cli: Cli, tmp_path: Path
) -> None:
    """The README's offline recipe: `looping model serve` where the example config's models
    are, then `looping serve` and `looping send` to `notes` and `planner`."""
    port, gateway_port, model_port = unused_ports(3)
    config = _example_config(tmp_path, port, gateway_port, model_port)
    env = {"A2A_SIGNING_KEY": json.dumps(generate_signing_key("example-key"))}
    model_log, serve_log = tmp_path / "model.log", tmp_path / "serve.log"
    model = start_looping("model", "serve", "--port", str(model_port), env={}, log=model_log)
    serving = start_looping("serve", "--config", str(config), env=env, log=serve_log, cwd=tmp_path)
    try:
        wait_for_url(f"http://127.0.0.1:{model_port}/v1/models", model, model_log)
        wait_for_url(f"http://127.0.0.1:{port}/readyz", serving, serve_log)
        base = ["--config", str(config), "--state", str(tmp_path / "state"), "--json"]
        notes = looping_cli("send", *base, "--tenant", "notes", "Remember the meeting moved.")
        assert notes.returncode == 0, notes.stderr + serve_log.read_text()
        task = json.loads(notes.stdout)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        answer = json.loads(task["artifacts"][0]["parts"][0]["text"])
        assert set(answer) == {"add_note", "list_notes"}  # each notes tool was called once
        assert answer["add_note"] == {"id": 1}  # the tool's result, as data
        assert task["metadata"]["looping.models"] == ["openai:llama3.2", "openai:llama3.2"]

        planner = looping_cli("send", *base, "--tenant", "planner", "Summarize my notes.")
        assert planner.returncode == 0, planner.stderr + serve_log.read_text()
        planned = json.loads(planner.stdout)
        assert planned["status"]["state"] == "TASK_STATE_COMPLETED", planned
    finally:
        stop(serving)
        stop(model)
