"""The agent's credentials (services/agent/session/enrolment.py): it enrols once with its join
token, keeps the credential owner-only in its work dir and presents it alone from then on, restarts
included, never presenting a used join token again; it presents the cluster token only when it has
no other way (compatibility mode); refused at enrolment it exits saying why; shut out by the master
(a revocation) it kills what it runs and exits, naming the revocation, without retrying."""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Callable
from pathlib import Path

from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from services.agent.runtime.processes import is_running
from services.agent.session.enrolment import CREDENTIAL_FILE, AgentAuth, CredentialStore
from tests.unit.agent.agent_master_double import MasterServer, wait_until
from tests.unit.agent.agent_processes import AgentProcess, command_pid, python_command


def _token_file(tmp_path: Path, name: str, value: str) -> str:
    path = tmp_path / name
    path.write_text(value + "\n")
    path.chmod(0o600)
    return str(path)


def test_what_the_agent_presents(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    compat = AgentAuth(agent_id="a1", store=store, cluster_token="cluster")
    assert compat.metadata() == [(CLUSTER_TOKEN_KEY, "cluster")] and not compat.can_enrol
    # With a way to enrol, the cluster token is not sent: the credential will be.
    joining = AgentAuth(agent_id="a1", store=store, join_token="jt", cluster_token="cluster")
    assert joining.metadata() == [] and joining.can_enrol and not joining.has_credential

    store.save("a1", "cred-1", join_token_sha256=hashlib.sha256(b"jt").hexdigest())
    assert stat.S_IMODE((tmp_path / CREDENTIAL_FILE).stat().st_mode) == 0o600
    restarted = AgentAuth(agent_id="a1", store=store, join_token="jt", cluster_token="cluster")
    assert restarted.metadata() == [(AGENT_CREDENTIAL_KEY, "cred-1")]
    # Its join token was used: it is no way to enrol again; a new one, or the secret, is.
    assert not restarted.can_enrol
    assert AgentAuth(agent_id="a1", store=store, join_token="another").can_enrol
    assert AgentAuth(agent_id="a1", store=store, enrolment_secret="secret").can_enrol
    # Another id's credential (the work dir was used under another --agent-id) is not presented.
    assert not AgentAuth(agent_id="a2", store=store).has_credential
    restarted.drop_credential()
    assert not (tmp_path / CREDENTIAL_FILE).exists() and restarted.metadata() == []


def test_an_agent_enrols_once_and_presents_its_credential_across_restarts(
    master: MasterServer, launch_agent: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    master.double.join_tokens.add("join-1")
    token_file = _token_file(tmp_path, "join-token", "join-1")
    agent = launch_agent(master.address, "--join-token-file", token_file, env={"CAIRN_CLUSTER_TOKEN": "c"})
    stream = master.double.wait_connected()
    assert stream.metadata.get(AGENT_CREDENTIAL_KEY) == "credential-agent-1-1"
    assert CLUSTER_TOKEN_KEY not in stream.metadata
    stored = agent.work_dir / CREDENTIAL_FILE
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["credential"] == "credential-agent-1-1"

    assert agent.stop() == 0
    launch_agent(master.address, "--join-token-file", token_file)
    again = master.double.wait_connected(2)
    # The same credential; the used join token was not presented again.
    assert again.metadata.get(AGENT_CREDENTIAL_KEY) == "credential-agent-1-1"
    assert len(master.double.enrolments) == 1


def test_a_refused_enrolment_ends_the_agent_with_the_masters_reason(
    master: MasterServer, launch_agent: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    master.double.join_tokens.add("the-good-one")
    agent = launch_agent(
        master.address, "--join-token-file", _token_file(tmp_path, "jt", "a-bad-one"), wait=False
    )
    assert agent.proc.wait(30) == 1
    text = agent.log_text()
    assert "the master refused to enrol agent agent-1 with a join token (UNAUTHENTICATED)" in text
    assert "join token: used already or not made here" in text
    assert not (agent.work_dir / CREDENTIAL_FILE).exists()


def test_a_shut_out_agent_kills_its_work_and_exits_naming_the_revocation(
    master: MasterServer, launch_agent: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    master.double.join_tokens.add("join-1")
    agent = launch_agent(master.address, "--join-token-file", _token_file(tmp_path, "jt", "join-1"))
    master.double.wait_connected()
    master.double.start("r1", python_command("import time; time.sleep(60)"))
    pid = command_pid(agent.container("r1"))

    master.double.shut_out("agent agent-1 was revoked by admin")
    assert agent.proc.wait(30) == 1
    text = agent.log_text()
    assert "the master shut this agent out" in text and "agent agent-1 was revoked by admin" in text
    # Its work was given up by the master: killed here, not left for a reattachment.
    wait_until(lambda: not is_running(pid), 10, "the container's command to be killed")
    # No retry: one stream, and no enrolment after the first.
    assert len(master.double.streams) == 1 and len(master.double.enrolments) == 1

    # Started again it is refused at once (its stored credential is revoked; its join token used).
    again = launch_agent(master.address, "--join-token-file", str(tmp_path / "jt"), wait=False)
    assert again.proc.wait(30) == 1
    assert "agent agent-1 was revoked" in again.log_text()
    assert len(master.double.enrolments) == 1
