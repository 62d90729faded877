"""The ports a trial serves through the master's proxy: an experiment's `environment.proxy_ports`,
reached at `/proxy/{task id}:{port}/` as Determined names them (the stock client's
`det experiment create --publish` and `python -m determined.cli.tunnel` build exactly that path).

As in Determined:

- only the trial's chief (rank 0) is proxied, from the moment its container runs until its
  allocation ends; a trial that is not running serves nothing there;
- a port is HTTP (and websockets) unless `proxy_tcp: true`, whose bytes are tunnelled over a
  websocket whatever the request;
- a session is needed unless `unauthenticated: true`, and any logged-in user may reach the port:
  Determined asks only whether the caller may view the experiment (`CanGetExperiment`), and in its
  open-source rule, which is Cairn's (identity/access.py), anyone logged in may read.

Nothing is registered anywhere: the ports are read from the experiment's stored config and the
address from the chief's container and its agent at each resolution, so the proxy follows restarts
of the trial and of the master, and a trial's end closes its ports with no step of its own. Cairn's
containers share their machine's network (the docker runtime uses host networking), so the trial
listens on the port itself at its agent's address. Who may reach a port is decided in
proxy_access.py, with the proxy's other rules.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.allocations.rendezvous import agent_address
from services.master.domain.config.view import ProxyPort, proxy_ports_of
from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.states import LIVE_ALLOCATION, TaskKind
from services.master.domain.kernel.states import AllocationState as A
from services.master.store import models

MAX_PORT = 65535


def split_service_id(service_id: str) -> tuple[str, int] | None:
    """(task id, port) of a service id `<task id>:<port>`; None when it names no port (a task's
    own service, as notebooks and shells are named), NotFound for a port that is no port."""
    task_id, sep, port_text = service_id.partition(":")
    if not sep:
        return None
    digits = port_text.isascii() and port_text.isdigit() and len(port_text) <= len(str(MAX_PORT))
    if not digits or not 1 <= int(port_text) <= MAX_PORT:
        raise NotFound(f"service {service_id[:160]}: {port_text[:16]!r} is not a port (1-65535)")
    return task_id, int(port_text)


def registered_port(s: Session, task: models.Task | None, port: int) -> ProxyPort | None:
    """The entry of `port` in the proxy ports of a trial's experiment; None for any other task or
    a port the experiment does not list."""
    if task is None or task.kind != TaskKind.TRIAL or task.experiment_id is None:
        return None
    config = s.scalar(select(models.Experiment.config).where(models.Experiment.id == task.experiment_id))
    ports = proxy_ports_of((config or {}).get("environment") or {})
    return next((p for p in ports if p.port == port), None)


def chief_address(s: Session, task_id: str) -> str | None:
    """host of the agent running the chief (rank 0) of the task's live allocation, once that
    container runs; None before (or when nothing is placed)."""
    row = s.execute(
        select(models.Agent.addresses)
        .join(models.Container, models.Container.agent_id == models.Agent.id)
        .join(models.Allocation, models.Allocation.id == models.Container.allocation_id)
        .where(
            models.Allocation.task_id == task_id,
            models.Allocation.state.in_(list(LIVE_ALLOCATION)),
            models.Container.rank == 0,
            models.Container.state == A.RUNNING,
        )
        .order_by(models.Allocation.run_id.desc())
        .limit(1)
    ).first()
    return None if row is None else agent_address(row[0] or [])


def address(host: str, port: int) -> str:
    """host:port, an IPv6 host in brackets (the proxy splits at the last colon)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
