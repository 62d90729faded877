"""Users, tokens and followers (issue 15), driven as their users drive them: the stock `det` client
(determined==0.38.1) and Cairn's CLI for users; trial code's own allocation token over gRPC; a master
bound beyond loopback; 200 followers of a running trial. Every check reads the end state back
(`det` exits 0 after many failures, so its exit code alone proves nothing)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from cairn.api.v1 import api_pb2_grpc, auth_pb2, experiment_pb2, master_pb2
from cairn.api.v1 import trial_pb2 as tpb
from cairn.client.password import salt_and_hash
from cairn.metadata_keys import ALLOCATION_TOKEN_KEY
from tests.e2e.determined_client import DET, det_runner, determined_env
from tests.e2e.helpers import ACTIVE_STATES, cairn_cli, config, create, logs, trial_state, trials, wait_state
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
# Small limits so the limiter shows within a test; the user tests stay under them.
LOGIN_ENV = {
    "CAIRN_LOGIN_FAILURES_PER_USER": "3",
    "CAIRN_LOGIN_FAILURES_PER_ADDRESS": "50",
    "CAIRN_LOGIN_WINDOW": "6",
}
TOKEN_TRIAL = """
import os, time
import cairn.core
with cairn.core.init() as core:
    print(f"TOKEN {os.environ['CAIRN_ALLOCATION_TOKEN']} {core.info.trial.trial_id}", flush=True)
    while not core.preempt.should_preempt():
        time.sleep(0.2)
    print("PREEMPTED", flush=True)
"""


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with two slots, and login limits small enough to reach."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=2, extra_env=LOGIN_ENV) as c:
        yield c


def det_login(env: dict[str, str], user: str, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DET), "-u", user, "user", "login", user],
        env=env,
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def det_as(env: dict[str, str], user: str, password: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`det` as `user` with a password (det_runner logs in with an empty one)."""
    assert det_login(env, user, password).returncode == 0

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(DET), "-u", user, *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


def user_named(api: AuthedStub, username: str) -> auth_pb2.User | None:
    found = [u for u in api.GetUsers(auth_pb2.GetUsersRequest()).users if u.username == username]
    return found[0] if found else None


def can_log_in(cluster: TestCluster, username: str, password: str) -> grpc.StatusCode | None:
    try:
        cluster.login(username, password)
    except grpc.RpcError as exc:
        return exc.code()
    return None


def test_users_with_the_stock_det_client_and_cairn(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin_det = det_runner(env, user="admin")
    api = cluster.login("admin")

    admin_det("user", "create", "alice", "--password", "Alice-pass1")
    admin_det("user", "create", "boss", "--admin", "--password", "Boss-pass1")
    listed = admin_det("user", "list")
    assert "alice" in listed and "boss" in listed
    alice, boss = user_named(api, "alice"), user_named(api, "boss")
    assert alice is not None and (alice.admin, alice.active) == (False, True)
    assert boss is not None and boss.admin
    assert can_log_in(cluster, "alice", "Alice-pass1") is None

    # A user changes their own password (det prompts twice, then logs in again with it).
    alice_det = det_as(env, "alice", "Alice-pass1")
    changed = alice_det("user", "change-password", stdin="Alice-pass2\nAlice-pass2\n")
    assert changed.returncode == 0, changed.stderr
    assert can_log_in(cluster, "alice", "Alice-pass1") == grpc.StatusCode.UNAUTHENTICATED
    assert can_log_in(cluster, "alice", "Alice-pass2") is None

    # A user who is not an admin is refused everything that needs one; nothing changes.
    refused = alice_det("user", "create", "eve", "--password", "Eve-pass12")
    assert "only an admin may create users" in refused.stdout + refused.stderr
    refused = alice_det("user", "deactivate", "admin")
    assert "only an admin" in refused.stdout + refused.stderr
    refused = alice_det("user", "change-password", "admin", stdin="Hijack-pw1\nHijack-pw1\n")
    assert "only an admin" in refused.stdout + refused.stderr
    assert user_named(api, "eve") is None
    admin_user = user_named(api, "admin")
    assert admin_user is not None and admin_user.active
    assert can_log_in(cluster, "admin", "") is None

    # An admin changes another user's password, deactivates (their sessions end) and reactivates.
    admin_det("user", "change-password", "alice", stdin="Alice-pass3\nAlice-pass3\n")
    assert can_log_in(cluster, "alice", "Alice-pass3") is None
    alice_api = cluster.login("alice", "Alice-pass3")
    admin_det("user", "deactivate", "alice")
    with pytest.raises(grpc.RpcError) as ended:
        alice_api.GetMe(auth_pb2.GetMeRequest())
    assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert can_log_in(cluster, "alice", "Alice-pass3") == grpc.StatusCode.PERMISSION_DENIED
    assert "alice" not in admin_det("user", "list") and "alice" in admin_det("user", "list", "--all")
    admin_det("user", "activate", "alice")
    assert can_log_in(cluster, "alice", "Alice-pass3") is None
    admin_det("user", "edit", "alice", "--admin", "true")
    assert user_named(api, "alice").admin  # type: ignore[union-attr]

    # Renamed, a user's experiments are listed under the new name at once (cached rows included).
    alice_api = cluster.login("alice", "Alice-pass3")
    experiment_id = create(alice_api, config(hyperparameters={"steps": 1}))
    wait_state(api, experiment_id, "COMPLETED", timeout=120)

    def owner_listed() -> str:
        listed = api.GetExperiments(experiment_pb2.GetExperimentsRequest())
        return next(e.username for e in listed.experiments if e.id == experiment_id)

    assert owner_listed() == "alice"
    admin_det("user", "rename", "alice", "alicia")
    assert owner_listed() == "alicia"
    admin_det("user", "rename", "alicia", "alice")

    # Cairn's CLI has the same verbs.
    cairn = cairn_cli(cluster, tmp_path / "cairn-home", user="admin")
    cairn("user", "create", "carol", "--password-stdin", stdin="Carol-pass1\n")
    assert "carol" in cairn("user", "list")
    cairn("user", "deactivate", "carol")
    assert can_log_in(cluster, "carol", "Carol-pass1") == grpc.StatusCode.PERMISSION_DENIED
    cairn("user", "activate", "carol")
    cairn("user", "change-password", "carol", "--password-stdin", stdin="Carol-pass2\n")
    assert can_log_in(cluster, "carol", "Carol-pass2") is None
    as_determined = cairn_cli(cluster, tmp_path / "cairn-det-home")
    refused_text = as_determined(
        "user", "create", "mallory", "--password-stdin", stdin="Mallory-1\n", check=False
    )
    assert "only an admin may create users" in refused_text
    assert user_named(api, "mallory") is None


def test_login_attempts_are_limited_per_user(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin_det = det_runner(env, user="admin")
    admin_det("user", "create", "dana", "--password", "Dana-pass1")
    for _ in range(3):
        assert det_login(env, "dana", "wrong-guess").returncode != 0
    paused = det_login(env, "dana", "Dana-pass1")  # the right password, refused while paused
    assert "too many failed logins for user dana" in paused.stdout + paused.stderr
    # Over REST: 429 with when to retry.
    body = json.dumps({"username": "dana", "password": salt_and_hash("Dana-pass1"), "isHashed": True})
    request = urllib.request.Request(
        f"{env['DET_MASTER']}/api/v1/auth/login",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=30)
    assert answer.value.code == 429
    assert "retry in" in answer.value.read().decode()
    assert can_log_in(cluster, "determined", "") is None  # another user is not paused
    time.sleep(6.5)  # the window passes
    assert det_login(env, "dana", "Dana-pass1").returncode == 0
    assert can_log_in(cluster, "dana", "Dana-pass1") is None


def _trial_code(
    cluster: TestCluster, api: AuthedStub, experiment_id: int
) -> tuple[int, api_pb2_grpc.CairnStub, list[tuple[str, str]]]:
    """The trial's id, and a stub with the token its code holds (it prints it for this test)."""
    wait_for(lambda: bool(trials(api, experiment_id)), timeout=60, what=f"experiment {experiment_id}'s trial")
    trial_id = trials(api, experiment_id)[0].id
    found: list[str] = []

    def printed() -> bool:
        found[:] = [line.split()[1] for line in logs(api, trial_id) if line.startswith("TOKEN ")]
        return bool(found)

    wait_for(printed, timeout=90, what=f"trial {trial_id} to print its token")
    return trial_id, cluster.raw_stub(), [(ALLOCATION_TOKEN_KEY, f"Bearer {found[0]}")]


def test_allocation_tokens_reach_only_their_own_trial_and_die_with_it(
    cluster: TestCluster, tmp_path: Path
) -> None:
    api = cluster.login("admin")
    model = tmp_path / "token_trial"
    model.mkdir()
    (model / "token_trial.py").write_text(TOKEN_TRIAL)
    text = config(entrypoint="python3 token_trial.py", searcher={"max_length": {"batches": 100}})
    first = create(api, text, model)
    second = create(api, text, model)
    first_trial, stub, first_token = _trial_code(cluster, api, first)
    second_trial, _, second_token = _trial_code(cluster, api, second)

    # Its own trial: open.
    own = stub.GetCurrentTrialSearcherOperation(
        tpb.GetCurrentTrialSearcherOperationRequest(trial_id=first_trial), metadata=first_token, timeout=30
    )
    assert own.op.validate_after.length == 100
    # Another trial's searcher operation: neither read nor completed.
    for call, request in (
        (
            stub.GetCurrentTrialSearcherOperation,
            tpb.GetCurrentTrialSearcherOperationRequest(trial_id=second_trial),
        ),
        (
            stub.CompleteTrialSearcherValidation,
            tpb.CompleteTrialSearcherValidationRequest(
                trial_id=second_trial,
                completed_operation=tpb.TrialOperation(validate_after=tpb.ValidateAfterOperation(length=100)),
                searcher_metric=0.0,
            ),
        ),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            call(request, metadata=first_token, timeout=30)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"not trial {second_trial}" in (refused.value.details() or "")
    untouched = stub.GetCurrentTrialSearcherOperation(
        tpb.GetCurrentTrialSearcherOperationRequest(trial_id=second_trial), metadata=second_token, timeout=30
    )
    assert not untouched.completed and untouched.op.validate_after.length == 100

    # Canceled: the trial ends, and its token with it.
    api.CancelExperiment(experiment_pb2.CancelExperimentRequest(id=first))
    wait_state(api, first, "CANCELED")
    report = tpb.ReportTrialMetricsRequest(
        metrics=tpb.TrialMetrics(trial_id=first_trial, trial_run_id=1, steps_completed=7), group="training"
    )
    with pytest.raises(grpc.RpcError) as dead:
        stub.ReportTrialMetrics(report, metadata=first_token, timeout=30)
    assert dead.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "has ended" in (dead.value.details() or "")
    stored = list(api.GetMetrics(tpb.GetMetricsRequest(trial_ids=[first_trial], group="training")))
    assert not any(m.total_batches == 7 for r in stored for m in r.metrics)
    api.KillExperiment(experiment_pb2.KillExperimentRequest(id=second))


def _non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (the one its default route uses)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # UDP: nothing is sent
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_a_master_beyond_loopback_needs_passwords_on_its_accounts(tmp_path: Path) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no address other than loopback to bind the master to")
    state = tmp_path / "master"
    command = [sys.executable, "-m", "services.master", "--host", address, "--port", "0", "--http-port", "0"]
    command += ["--state-dir", str(state), "--ready-file", str(state / "ready.json")]
    # Plain gRPC beyond loopback is refused on its own (TLS rule); this test is about the accounts.
    command += ["--insecure-allow-plaintext"]
    env = {key: value for key, value in os.environ.items() if key != "CAIRN_INITIAL_USER_PASSWORD"}
    refused = subprocess.run(
        command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode == 1
    assert "admin, determined have an empty password" in refused.stderr
    assert "--initial-user-password" in refused.stderr
    assert not (state / "ready.json").exists()

    started = subprocess.Popen(
        command,
        env={**env, "CAIRN_INITIAL_USER_PASSWORD": "First-pass1"},
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for((state / "ready.json").exists, timeout=60, what="the master to start")
        port = json.loads((state / "ready.json").read_text())["grpc_port"]
        with grpc.insecure_channel(f"{address}:{port}") as channel:
            stub = api_pb2_grpc.CairnStub(channel)

            def login(password: str) -> grpc.StatusCode | None:
                request = auth_pb2.LoginRequest(
                    username="admin", password=salt_and_hash(password), is_hashed=True
                )
                try:
                    stub.Login(request, timeout=30)
                except grpc.RpcError as exc:
                    return exc.code()
                return None

            assert login("") == grpc.StatusCode.UNAUTHENTICATED
            assert login("First-pass1") is None
    finally:
        started.terminate()
        started.wait(timeout=30)


FOLLOWERS = 200


def test_followers_stay_open_until_the_trial_ends(cluster: TestCluster) -> None:
    api = cluster.login()
    experiment_id = create(
        api, config(hyperparameters={"steps": 40, "step_s": 0.5}, searcher={"max_length": {"batches": 40}})
    )
    wait_for(lambda: bool(trials(api, experiment_id)), timeout=60, what="the trial")
    trial_id = trials(api, experiment_id)[0].id
    received: list[list[str]] = [[] for _ in range(FOLLOWERS)]
    ended: dict[int, str] = {}

    def follow(index: int) -> None:
        try:
            request = tpb.TrialLogsRequest(trial_id=trial_id, follow=True)
            # Bounded: well past the trial's 20 s, so a stream that never ends fails the test.
            for line in api.TrialLogs(request, timeout=240):
                received[index].append(line.message.rstrip("\n"))
            ended[index] = "ended"
        except grpc.RpcError as exc:
            ended[index] = f"{exc.code()}: {exc.details()}"

    threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(FOLLOWERS)]
    for thread in threads:
        thread.start()
    # While the trial runs, every follower stays open, and the master answers other calls.
    # The followers' ends are read before the trial's state: a follower that ended before the
    # trial was seen active ended early, while one that ends after that read may have seen the end.
    while True:
        ended_before = dict(ended)
        if trial_state(trials(api, experiment_id)[0]) not in ACTIVE_STATES:
            break
        assert not ended_before, sorted(set(ended_before.values()))[:3]
        started = time.monotonic()
        api.GetMaster(master_pb2.GetMasterRequest())
        assert time.monotonic() - started < 5
        time.sleep(2)
    wait_state(api, experiment_id, "COMPLETED")
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(set(ended.values())) == ["ended"]
    complete = logs(api, trial_id)
    assert any("LEDGER training 40" in line for line in complete)
    assert all(lines == complete for lines in received)
