"""A shell task's entrypoint (`python -m cairn.shell_server`): an SSH server (asyncssh) on the
address and port the master gave the task, reached only through the master's proxy, that lets in
only the key pair the master made for this shell, and runs each session's command, or an
interactive shell on a pseudo-terminal, as the task's own user, in its working directory, with
its environment. It reports the allocation ready once it listens, and runs until the task is
killed.

Its host key is made at start: the stock client connects with StrictHostKeyChecking=no (each
shell is a new host to it), and a key that never leaves the task needs no storing. Port forwarding
and SFTP are served, as OpenSSH's sshd does in Determined's shells (IDEs' remote modes need both);
they give the key's holder nothing the shell itself does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import pwd
import signal
import struct
import sys
import termios
from collections.abc import Mapping

import asyncssh

import cairn.task_environment as tenv
from cairn.notebook_server import report_ready

CHUNK_BYTES = 64 * 1024
# Once a session's command has exited, how long its terminal may still be read: a background
# process that keeps the terminal open must not hold the session open forever.
OUTPUT_GRACE_S = 2.0
# prctl(2): the child gets SIGHUP when the server dies, as a vanished terminal's session does.
_PR_SET_PDEATHSIG = 1


class LaunchError(Exception):
    """The task's environment lacks what a shell needs."""


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise LaunchError(f"{name} is not set: shells run as tasks the master starts")
    return value


def user_shell(env: Mapping[str, str]) -> str:
    """The task user's shell: $SHELL, else its passwd entry's (a service user's is often nologin),
    else bash, else /bin/sh."""
    candidates = [env.get("SHELL", "")]
    with contextlib.suppress(KeyError):
        candidates.append(pwd.getpwuid(os.getuid()).pw_shell)
    candidates.append("/bin/bash")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and not candidate.endswith(("nologin", "false")):
            return candidate
    return "/bin/sh"


def session_argv(shell: str, command: str | None) -> list[str]:
    """What a session runs: its command through the user's shell, else the shell itself. Not a
    login shell: a login shell's profile would reset PATH, and the task's environment (its
    virtualenv, DET_* variables) is what a user opens a shell on a task for."""
    return [shell, "-c", command] if command else [shell]


def session_environment(env: Mapping[str, str], term: str | None) -> dict[str, str]:
    """The task's environment for a session, with the client's terminal type; the shell's public
    key stays with the server."""
    result = {k: v for k, v in env.items() if k != tenv.SHELL_PUBLIC_KEY}
    if term:
        result["TERM"] = term
    return result


def _die_with_server() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGHUP)


def _take_terminal() -> None:
    """In the child, after setsid: the pty on stdin becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    _die_with_server()


def _set_window(fd: int, width: int, height: int, pixwidth: int, pixheight: int) -> None:
    if width and height:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, pixwidth, pixheight))


async def _wait_fd(fd: int, *, writable: bool) -> None:
    """Until a non-blocking descriptor can be read (or written) without blocking."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if writable:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def _read_fd(fd: int) -> bytes:
    """One read of a non-blocking descriptor; b"" at its end (EIO: a pty's last holder left)."""
    while True:
        try:
            return os.read(fd, CHUNK_BYTES)
        except BlockingIOError:
            await _wait_fd(fd, writable=False)
        except OSError:
            return b""


async def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await _wait_fd(fd, writable=True)


class ShellSessions:
    """The sessions of one server: each runs a process of its own, all of them ended with it."""

    def __init__(self, env: Mapping[str, str], workdir: str) -> None:
        self.env = dict(env)
        self.workdir = workdir
        self.shell = user_shell(env)
        self.children: set[asyncio.subprocess.Process] = set()

    async def handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if process.subsystem:  # sftp is served by asyncssh itself; nothing else is offered
            process.exit(1)
            return
        argv = session_argv(self.shell, process.command)
        env = session_environment(self.env, process.get_terminal_type())
        try:
            if process.get_terminal_type() is not None:
                status = await self._run_on_terminal(process, argv, env)
            else:
                status = await self._run_on_pipes(process, argv, env)
        except OSError as exc:
            process.stderr.write(f"shell: cannot start {argv[0]}: {exc}\r\n".encode())
            status = 127
        process.exit(status)

    async def _run_on_terminal(
        self, process: asyncssh.SSHServerProcess[bytes], argv: list[str], env: dict[str, str]
    ) -> int:
        primary, secondary = os.openpty()
        try:
            _set_window(secondary, *process.get_terminal_size())
            child = await asyncio.create_subprocess_exec(
                *argv,
                stdin=secondary,
                stdout=secondary,
                stderr=secondary,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
                preexec_fn=_take_terminal,
            )
        except BaseException:
            os.close(primary)
            raise
        finally:
            os.close(secondary)
        os.set_blocking(primary, False)
        self.children.add(child)
        feeding = asyncio.create_task(self._feed_terminal(process, primary))
        output = asyncio.create_task(self._drain(primary, process.stdout))
        try:
            status = await child.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(output), OUTPUT_GRACE_S)
        finally:
            self.children.discard(child)
            for task in (feeding, output):
                task.cancel()
            await asyncio.gather(feeding, output, return_exceptions=True)
            os.close(primary)
        return _exit_status(status)

    async def _feed_terminal(self, process: asyncssh.SSHServerProcess[bytes], primary: int) -> None:
        while True:
            try:
                data = await process.stdin.read(CHUNK_BYTES)
            except asyncssh.TerminalSizeChanged as change:
                _set_window(primary, change.width, change.height, change.pixwidth, change.pixheight)
                continue
            if not data:
                return
            await _write_fd(primary, data)

    async def _drain(self, fd: int, writer: asyncssh.SSHWriter[bytes]) -> None:
        while data := await _read_fd(fd):
            writer.write(data)
            await writer.drain()

    async def _run_on_pipes(
        self, process: asyncssh.SSHServerProcess[bytes], argv: list[str], env: dict[str, str]
    ) -> int:
        child = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.workdir,
            env=env,
            preexec_fn=_die_with_server,
        )
        assert child.stdin and child.stdout and child.stderr
        self.children.add(child)
        feeding = asyncio.create_task(self._feed_pipe(process, child.stdin))
        try:
            await asyncio.gather(
                self._copy(child.stdout, process.stdout), self._copy(child.stderr, process.stderr)
            )
            status = await child.wait()
        finally:
            self.children.discard(child)
            feeding.cancel()
            await asyncio.gather(feeding, return_exceptions=True)
        return _exit_status(status)

    async def _feed_pipe(
        self, process: asyncssh.SSHServerProcess[bytes], stdin: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await process.stdin.read(CHUNK_BYTES):
                stdin.write(data)
                await stdin.drain()
        stdin.close()

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncssh.SSHWriter[bytes]) -> None:
        while data := await reader.read(CHUNK_BYTES):
            writer.write(data)
            await writer.drain()

    def hang_up(self) -> None:
        """The task is being stopped: every session's processes get the hangup a closed terminal
        sends."""
        for child in list(self.children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGHUP)
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGHUP)


def _exit_status(returncode: int) -> int:
    """A shell's convention: 128 + the signal for a process a signal ended."""
    return 128 - returncode if returncode < 0 else returncode


class _ShellServer(asyncssh.SSHServer):
    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        # Local port forwarding reaches what the shell's own processes can reach, no more.
        return True


async def start_server(env: Mapping[str, str], workdir: str) -> tuple[asyncssh.SSHAcceptor, ShellSessions]:
    """The SSH server listening on the task's service address, letting in only the shell's key."""
    host = _required(env, tenv.SERVICE_HOST)
    port = int(_required(env, tenv.SERVICE_PORT))
    authorized = asyncssh.import_authorized_keys(_required(env, tenv.SHELL_PUBLIC_KEY))
    sessions = ShellSessions(env, workdir)
    server = await asyncssh.create_server(
        _ShellServer,
        host,
        port,
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        authorized_client_keys=authorized,
        process_factory=sessions.handle,
        encoding=None,
        # The session's own pty does the line editing; asyncssh's would echo everything twice.
        line_editor=False,
        password_auth=False,
        kbdint_auth=False,
        agent_forwarding=False,
        x11_forwarding=False,
        sftp_factory=True,
        allow_scp=True,
    )
    return server, sessions


async def serve(env: Mapping[str, str], workdir: str) -> int:
    server, sessions = await start_server(env, workdir)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    # The agent stops a task with SIGTERM: hang every session up, then stop listening.
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    loop.add_signal_handler(signal.SIGINT, stopped.set)
    await loop.run_in_executor(None, report_ready, env)
    # Determined's shells log this line once their sshd is up.
    print(f"shell: Server listening on {env[tenv.SERVICE_HOST]}:{env[tenv.SERVICE_PORT]}", flush=True)
    await stopped.wait()
    sessions.hang_up()
    server.close()
    await server.wait_closed()
    return 0


def main() -> int:
    try:
        return asyncio.run(serve(os.environ, os.getcwd()))
    except LaunchError as exc:
        print(f"shell: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
