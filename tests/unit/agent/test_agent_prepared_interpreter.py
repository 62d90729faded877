"""The standby shim's side of a prepared interpreter (runtime/shim.py, PreparedInterpreter): when
the binder made ahead is used, when the hand-over binds the old way, and that nothing outlives
it. The binder itself, with real namespaces, is tested in test_agent_private_mounts.py; the whole
warm start in test_agent_warm_starts.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.agent.runtime import shim
from services.agent.runtime.private_mounts import Bind
from services.agent.runtime.warm_starts import PythonRun, WarmCommand

COMMAND = WarmCommand(
    run=PythonRun(python=sys.executable, module=False, target="train.py", args=(), unbuffered=False),
    binds=(Bind(Path("/var/lib/cairn/task"), "/run/determined"),),
)


class Binder:
    """What PreparedInterpreter asks of a NamespaceBinder, recorded."""

    def __init__(self, current: bool = True) -> None:
        self.current = current
        self.calls: list[str] = []

    def still_current(self) -> bool:
        return self.current

    def bind(self, binds: Any, unmount: Any) -> None:
        self.calls.append("bind")

    def discard(self) -> None:
        self.calls.append("discard")


@pytest.fixture
def interpreter() -> Any:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE, process_group=0
    )
    yield child
    child.kill()
    child.wait()


@pytest.fixture
def one_step(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The hand-over's own bind (bind_in_namespace), recorded instead of made."""
    calls: list[int] = []
    monkeypatch.setattr(shim, "bind_in_namespace", lambda pid, binds, unmount: calls.append(pid))
    monkeypatch.setattr(shim.PreparedInterpreter, "_wait_until_python", lambda self: None)
    return calls


def prepared_with(child: Any, binder: Binder | None) -> shim.PreparedInterpreter:
    prepared = shim.PreparedInterpreter(child, sys.executable, ["/tmp"])
    prepared._binder = binder  # type: ignore[assignment]
    return prepared


def test_the_binder_made_ahead_makes_the_binds(interpreter: Any, one_step: list[int]) -> None:
    binder = Binder()
    prepared_with(interpreter, binder).assign(COMMAND, {}, "/")
    assert binder.calls == ["bind"]
    assert one_step == []


def test_a_process_that_moved_to_another_namespace_is_bound_where_it_is_now(
    interpreter: Any, one_step: list[int]
) -> None:
    binder = Binder(current=False)
    prepared_with(interpreter, binder).assign(COMMAND, {}, "/")
    assert binder.calls == ["discard"]
    assert one_step == [interpreter.pid]


def test_an_interpreter_that_died_discards_its_binder_and_is_not_signalled_once_reaped(
    monkeypatch: pytest.MonkeyPatch, one_step: list[int]
) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, process_group=0)
    child.wait()  # reaped: its pid, and its group, may be another process's now
    signalled: list[int] = []
    monkeypatch.setattr(shim, "signal_group", lambda pgid, sig: signalled.append(pgid))
    binder = Binder()
    prepared = prepared_with(child, binder)
    with pytest.raises(OSError, match="had exited"):
        prepared.assign(COMMAND, {}, "/")
    assert binder.calls == ["discard"]
    prepared.discard()
    assert signalled == []


def test_a_standby_without_a_private_tmp_enters_nothing_ahead(interpreter: Any) -> None:
    prepared = shim.PreparedInterpreter(interpreter, sys.executable, [])
    prepared.enter_namespace_ahead()
    assert prepared._binder is None


def test_a_discarded_standby_discards_its_binder(interpreter: Any) -> None:
    binder = Binder()
    prepared_with(interpreter, binder).discard()
    assert binder.calls == ["discard"]
    assert interpreter.returncode is not None
