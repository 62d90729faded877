"""A shell task's SSH server (cairn.shell_server) with a real SSH client: it lets in only the
shell's key, runs a command in the task's working directory with the task's environment (on pipes
and on a pseudo-terminal, the way `det shell open` asks with ssh -tt), returns its exit status,
keeps the public key to itself, and refuses to start without what the master hands a shell."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh
import pytest

import cairn.task_environment as tenv
from cairn import shell_server
from tests.support.ports import free_port


def test_a_session_runs_in_the_tasks_directory_and_environment_for_the_shells_key_only(
    tmp_path: Path,
) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "SHELL": "/bin/sh",
        "MARK": "from-the-task",
        tenv.SERVICE_HOST: "127.0.0.1",
        tenv.SERVICE_PORT: str(port),
        tenv.SHELL_PUBLIC_KEY: key.export_public_key().decode(),
    }

    async def scenario() -> None:
        server, _ = await shell_server.start_server(env, str(tmp_path))
        options = {"known_hosts": None, "username": "anyone"}
        try:
            async with asyncssh.connect("127.0.0.1", port, client_keys=[key], **options) as conn:
                piped = await conn.run("pwd; echo $MARK; echo ${CAIRN_SHELL_PUBLIC_KEY:-none}; exit 3")
                assert piped.stdout == f"{tmp_path}\nfrom-the-task\nnone\n"
                assert piped.exit_status == 3
                on_terminal = await conn.run("tty; echo $TERM", term_type="xterm", term_size=(80, 24))
                lines = str(on_terminal.stdout).split()
                assert lines[0].startswith("/dev/pts/") and lines[1] == "xterm"
                assert on_terminal.exit_status == 0
            with pytest.raises(asyncssh.PermissionDenied):
                await asyncssh.connect("127.0.0.1", port, client_keys=[stranger], **options)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_the_server_needs_what_the_master_hands_a_shell() -> None:
    with pytest.raises(shell_server.LaunchError, match=tenv.SHELL_PUBLIC_KEY):
        asyncio.run(shell_server.start_server({tenv.SERVICE_HOST: "127.0.0.1", tenv.SERVICE_PORT: "1"}, "/"))


def test_a_session_is_its_command_through_the_users_shell_and_a_signal_reads_as_128_plus_it() -> None:
    assert shell_server.session_argv("/bin/bash", "echo ok") == ["/bin/bash", "-c", "echo ok"]
    assert shell_server.session_argv("/bin/bash", None) == ["/bin/bash"]
    assert shell_server.session_environment({"A": "1", tenv.SHELL_PUBLIC_KEY: "k"}, "vt100") == {
        "A": "1",
        "TERM": "vt100",
    }
    assert shell_server._exit_status(-9) == 137 and shell_server._exit_status(2) == 2
    assert shell_server.user_shell({"SHELL": "/nonexistent"}).startswith("/")
