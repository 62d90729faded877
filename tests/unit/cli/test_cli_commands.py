"""Command-level behaviour that needs no master: argument handling, messages, exit codes."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cairn.cli.errors import EXIT_INTERRUPTED
from cairn.cli.groups import RootGroup
from cairn.cli.main import cli, run
from cairn.client.token_store import TokenStore


def unreachable(port: int) -> str:
    return f"error: cannot reach the master at 127.0.0.1:{port} (is the cluster up? `cairn cluster up`)\n"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_cluster_status_without_a_cluster(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["cluster", "status", "--state-dir", str(tmp_path / "nothing")])
    assert result.exit_code == 0
    assert "No cluster recorded in" in result.stdout


def test_cluster_down_without_a_cluster(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["cluster", "down", "--state-dir", str(tmp_path / "nothing")])
    assert result.exit_code == 0
    assert result.stdout.startswith("Nothing was running")


def test_experiment_list_against_a_closed_port(runner: CliRunner, closed_port: int) -> None:
    result = runner.invoke(cli, ["-m", f"127.0.0.1:{closed_port}", "experiment", "list"])
    assert result.exit_code == 1
    assert result.stderr == unreachable(closed_port)
    assert result.stdout == ""


def test_master_from_environment_and_aliases(
    runner: CliRunner, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_MASTER", f"grpc://127.0.0.1:{closed_port}")
    for args in (
        ["e", "ls"],
        ["t", "list", "1"],
        ["a", "list"],
        ["s", "list"],
        ["rp", "list"],
        ["c", "list", "1"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, args
        assert result.stderr == unreachable(closed_port), args


def test_http_master_url_is_refused_in_one_line(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["-m", "http://localhost:8080", "master", "info"])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "-m localhost:8090" in result.stderr


def test_login_reads_password_from_stdin_without_prompting(runner: CliRunner, closed_port: int) -> None:
    result = runner.invoke(
        cli,
        ["-m", f"127.0.0.1:{closed_port}", "user", "login", "admin", "--password-stdin"],
        input="s3cret\n",
    )
    assert result.exit_code == 1
    assert "Password" not in result.output
    assert result.stderr == unreachable(closed_port)


def test_login_uses_cairn_password_without_prompting(
    runner: CliRunner, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_PASSWORD", "")
    result = runner.invoke(cli, ["-m", f"127.0.0.1:{closed_port}", "user", "login"])
    assert "Password" not in result.output
    assert result.stderr == unreachable(closed_port)


def test_logout_when_not_logged_in(runner: CliRunner, closed_port: int) -> None:
    result = runner.invoke(cli, ["-m", f"127.0.0.1:{closed_port}", "user", "logout"])
    assert result.exit_code == 0
    assert result.stdout == f"Not logged in to 127.0.0.1:{closed_port}\n"


def test_logout_forgets_the_token_even_when_the_master_is_down(runner: CliRunner, closed_port: int) -> None:
    master = f"127.0.0.1:{closed_port}"
    store = TokenStore.default()
    store.save_login(master, "determined", "tok")
    result = runner.invoke(cli, ["-m", master, "user", "logout"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Logged out determined from {master}\n"
    assert store.active_token(master) is None


def test_create_refuses_logs_without_follow(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "const.yaml"
    config.write_text("name: x\n")
    result = runner.invoke(cli, ["experiment", "create", str(config), "--logs"])
    assert result.exit_code == 2
    assert "--logs only works with --follow" in result.stderr


def test_create_packs_the_config_directory_then_reports_the_master_down(
    runner: CliRunner, tmp_path: Path, closed_port: int
) -> None:
    (tmp_path / "const.yaml").write_text("name: x\n")
    (tmp_path / "train.py").write_text("print(1)\n")
    result = runner.invoke(
        cli, ["-m", f"127.0.0.1:{closed_port}", "e", "create", str(tmp_path / "const.yaml")]
    )
    assert result.exit_code == 1
    assert "Model definition: 2 entries" in result.stderr
    assert result.stderr.endswith(unreachable(closed_port))


def test_delete_asks_first(runner: CliRunner, closed_port: int) -> None:
    result = runner.invoke(cli, ["-m", f"127.0.0.1:{closed_port}", "e", "delete", "7"], input="n\n")
    assert result.exit_code == 1
    assert "Delete experiment 7" in result.stderr


def test_bad_state_filter_is_a_usage_error() -> None:
    assert run(["experiment", "list", "--state", "bogus"]) == 2


def test_run_returns_exit_codes(capsys: pytest.CaptureFixture[str], closed_port: int) -> None:
    assert run(["--version"]) == 0
    assert run(["-m", f"127.0.0.1:{closed_port}", "trial", "describe", "3"]) == 1
    assert capsys.readouterr().err == unreachable(closed_port)


def test_keyboard_interrupt_exits_130_quietly(runner: CliRunner) -> None:
    @click.group(cls=RootGroup)
    def root() -> None:
        pass

    @root.command()
    def wait() -> None:
        raise KeyboardInterrupt

    result = runner.invoke(root, ["wait"])
    assert result.exit_code == EXIT_INTERRUPTED
    assert result.output == ""


def test_unexpected_errors_are_one_line_too() -> None:
    @click.group(cls=RootGroup)
    def root() -> None:
        pass

    @root.command()
    def broken() -> None:
        raise FileNotFoundError(2, "No such file or directory", "/nope")

    result = CliRunner().invoke(root, ["broken"])
    assert result.exit_code == 1
    assert result.stderr == "error: /nope: No such file or directory\n"
