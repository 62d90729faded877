"""The cluster token comes from the environment or an owner-only file, never from a command line
(every user can read every process's argv)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from services.common.cluster_token import add_cluster_token_flags


def parse(argv: list[str], environ: dict[str, str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="service")
    add_cluster_token_flags(parser, environ or {})
    return parser.parse_args(argv)


def token_file(tmp_path: Path, text: str = "s3cret\n", mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


def usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], environ: dict[str, str] | None = None
) -> str:
    with pytest.raises(SystemExit) as exited:
        parse(argv, environ)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_the_token_comes_from_an_owner_only_file_or_the_environment(tmp_path: Path) -> None:
    assert parse(["--cluster-token-file", str(token_file(tmp_path))]).cluster_token == "s3cret"
    assert parse([], {"CAIRN_CLUSTER_TOKEN": "from-env"}).cluster_token == "from-env"
    file_env = {"CAIRN_CLUSTER_TOKEN_FILE": str(token_file(tmp_path, mode=0o400)), "CAIRN_CLUSTER_TOKEN": "x"}
    assert parse([], file_env).cluster_token == "s3cret"
    assert parse([]).cluster_token is None


def test_a_token_on_the_command_line_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--cluster-token", "s3cret"], ["--cluster-token=s3cret"]):
        assert "--cluster-token: a token on the command line is visible to every user" in usage_error(
            capsys, argv
        )


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        ("s3cret", 0o644, "has mode 0644; others could read the token"),
        ("s3cret", 0o640, "has mode 0640"),
        ("", 0o600, "must hold one token"),
        ("two words", 0o600, "must hold one token"),
        ("x" * 5000, 0o600, "is over 4096 bytes"),
    ],
)
def test_a_file_others_could_read_or_that_holds_no_token_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, mode: int, expected: str
) -> None:
    path = token_file(tmp_path, text, mode)
    err = usage_error(capsys, ["--cluster-token-file", str(path)])
    assert f"--cluster-token-file: {path} " in err and expected in err
    err = usage_error(capsys, [], {"CAIRN_CLUSTER_TOKEN_FILE": str(path)})
    assert "CAIRN_CLUSTER_TOKEN_FILE:" in err and expected in err


def test_links_and_folders_are_not_token_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "link"
    link.symlink_to(token_file(tmp_path))
    assert "cannot open" in usage_error(capsys, ["--cluster-token-file", str(link)])
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o700)
    assert "is not a regular file" in usage_error(capsys, ["--cluster-token-file", str(folder)])
    assert "cannot open" in usage_error(capsys, ["--cluster-token-file", str(tmp_path / "missing")])
