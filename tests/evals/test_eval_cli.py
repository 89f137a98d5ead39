"""`looping eval` as a person runs it: a served model (`looping model serve`), the example
config's tenants served by `eval` itself, the example dataset passing; a broken agent failing
with the case and the check named; a model that varies, its pass rate over `--repeat`; the
JSON and JUnit reports."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from looping_core.testing import ed25519_private_jwk

from support.ports import unused_ports
from support.processes import start_looping, stop, wait_for_url
from support.served import TESTS

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "looping.toml"
DATASET = ROOT / "examples" / "evals.toml"
KEY = json.dumps(ed25519_private_jwk("eval-agent"))


def model_server(tmp_path: Path, port: int, model: str | None = None) -> Iterator[None]:
    log = tmp_path / "model.log"
    more = ("--model", model) if model else ()
    process = start_looping(
        "model", "serve", "--port", str(port), *more, env={"PYTHONPATH": str(TESTS)}, log=log
    )
    try:
        wait_for_url(f"http://127.0.0.1:{port}/v1/models", process, log)
        yield
    finally:
        stop(process)


def example_config(tmp_path: Path, model_port: int, *, words_agent: str | None = None) -> Path:
    port, gateway_port = unused_ports(2)
    text = (
        EXAMPLE.read_text()
        .replace("port = 8080", f"port = {port}")
        .replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
        .replace("http://127.0.0.1:9000", f"http://127.0.0.1:{gateway_port}")
        .replace("http://127.0.0.1:11434/v1", f"http://127.0.0.1:{model_port}/v1")
        .replace("sqlite:///looping.db", f"sqlite:///{tmp_path / 'looping.db'}")
    )
    if words_agent is not None:
        text = text.replace("looping_plugins_example.agent:WordCountAgent", words_agent)
    config = tmp_path / "looping.toml"
    config.write_text(text)
    return config


def looping_eval(
    tmp_path: Path, config: Path, dataset: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    script = str(Path(sys.executable).with_name("looping"))
    env = {"A2A_SIGNING_KEY": KEY, "PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [script, "eval", "--config", str(config), "--state", str(tmp_path / "state"),
         str(dataset), *args],
        capture_output=True, text=True, timeout=240, env=env, check=False,
    )  # fmt: skip


@pytest.fixture
def test_model(tmp_path: Path) -> Iterator[int]:
    [port] = unused_ports(1)
    yield from (port for _ in model_server(tmp_path, port))


def test_the_example_dataset_passes_against_the_example_tenants(
    tmp_path: Path, test_model: int
) -> None:
    config = example_config(tmp_path, test_model)
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    ran = looping_eval(tmp_path, config, DATASET, "--json", str(report), "--junit", str(junit))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "4 of 4 runs passed (100%)" in ran.stdout
    assert "refunds once approved  1/1" in ran.stdout
    results = json.loads(report.read_text())
    assert (results["runs"], results["passed"], results["met"]) == (4, 4, True)
    refunds = next(case for case in results["cases"] if case["name"] == "refunds once approved")
    states = [turn["state"] for turn in refunds["turns"]]
    assert states == ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"]
    suite = ElementTree.parse(junit).getroot()
    assert (suite.tag, suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        "testsuite",
        "4",
        "0",
        "0",
    )
    assert [case.get("name") for case in suite] == [
        "counts words [run 1]", "keeps a note [run 1]", "triages a ticket [run 1]",
        "refunds once approved [run 1]",
    ]  # fmt: skip


def test_a_broken_agent_fails_naming_the_case_and_the_check(
    tmp_path: Path, test_model: int
) -> None:
    config = example_config(tmp_path, test_model, words_agent="support.agents:MiscountingAgent")
    junit = tmp_path / "junit.xml"
    ran = looping_eval(tmp_path, config, DATASET, "--junit", str(junit))
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "3 of 4 runs passed (75%)" in ran.stdout
    assert "FAILED counts words (run 1): text_contains: expected 4, got 5" in ran.stdout
    [failure] = ElementTree.parse(junit).getroot().iter("failure")
    assert failure.get("message") == "text_contains: expected 4, got 5"


def test_repeats_report_the_pass_rate_of_a_model_that_varies(tmp_path: Path) -> None:
    [model_port] = unused_ports(1)
    dataset = tmp_path / "notes.toml"
    dataset.write_text(
        'tenant = "notes"\n[[cases]]\nname = "takes the note"\n[[cases.turns]]\n'
        'text = "remember milk"\n'
        'expect = { state = "completed", tools = ["add_note"], text_contains = ["Noted"] }\n'
    )
    for _ in model_server(tmp_path, model_port, "support.note_models:forgets_one_in_five"):
        config = example_config(tmp_path, model_port)
        strict = looping_eval(tmp_path, config, dataset, "--repeat", "5", "--concurrency", "1")
        lenient = looping_eval(
            tmp_path, config, dataset, "--repeat", "5", "--concurrency", "1",
            "--min-pass-rate", "0.8",
        )  # fmt: skip
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "takes the note  4/5" in strict.stdout
    assert "4 of 5 runs passed (80%)" in strict.stdout
    assert 'FAILED takes the note (run 5): tools: expected ["add_note"], got []' in strict.stdout
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "4 of 5 runs passed (80%)" in lenient.stdout


def test_a_judge_from_the_dataset_grades_the_answers(tmp_path: Path) -> None:
    [model_port] = unused_ports(1)
    dataset = tmp_path / "judged.toml"
    dataset.write_text(
        f"""
tenant = "notes"
[judge]
system = "You grade answers."
prompt = "Rubric: {{rubric}}\\nAnswer: {{answer}}"
passes = "^PASS"
model = {{ model = "grader", base_url = "http://127.0.0.1:{model_port}/v1", max_retries = 0 }}
[[cases]]
name = "confirms the note"
[[cases.turns]]
text = "remember milk"
expect = {{ rubric = "It confirms the note." }}
[[cases]]
name = "asks for more than it says"
[[cases.turns]]
text = "remember eggs"
expect = {{ rubric = "It lists every note.", text_contains = ["eggs"] }}
"""
    )
    for _ in model_server(tmp_path, model_port, "support.note_models:notes_and_grades"):
        ran = looping_eval(tmp_path, example_config(tmp_path, model_port), dataset)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "confirms the note           1/1     1/1" in ran.stdout
    assert (
        "FAILED asks for more than it says (run 1): text_contains: expected eggs, got Noted."
        in ran.stdout
    )


def test_a_dataset_with_mistakes_names_each_and_runs_nothing(tmp_path: Path) -> None:
    dataset = tmp_path / "broken.toml"
    dataset.write_text(
        '[[cases]]\nname = "x"\n[[cases.turns]]\ntext = "hi"\nexpect = { state = "done" }\n'
    )
    config = example_config(tmp_path, 9)  # never asked: the dataset is refused first
    ran = looping_eval(tmp_path, config, dataset)
    assert ran.returncode == 1
    assert "2 dataset problems" in ran.stderr
    assert "no tenant: set the dataset's tenant or the case's @ $.cases[0].tenant" in ran.stderr
    assert "state must be one of completed, failed" in ran.stderr
    assert "Traceback" not in ran.stderr
