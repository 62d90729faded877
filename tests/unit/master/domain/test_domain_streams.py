"""Determined's streaming updates in the domain (domain/streams): the range-encoded id sets and the
startup message, bounded and refused naming the field; every change of a project, model or model
version numbered and published once its unit of work commits (a rolled-back unit publishes
nothing), through whichever transition function made it, ORM or bulk statement; each subscriber
given only what its filter matches and its reader may read, a move out of its filter as a
deletion; a sync that sends what the client lacks and names what it knows that is gone; and a
client that falls behind dropped, its queue bounded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from services.common.principal import Principal
from services.master.domain.checkpoints import model_registry
from services.master.domain.deletion import workspace_deletion
from services.master.domain.identity import groups, role_assignments, roles
from services.master.domain.identity.grants import GrantCache
from services.master.domain.identity.role_assignments import Assignment, Requested
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.streams import keysets
from services.master.domain.streams.changes import StreamChanges
from services.master.domain.streams.entities import MODEL_VERSIONS, MODELS, PROJECTS
from services.master.domain.streams.publisher import Publisher, Subscriber, TooManySubscribers
from services.master.domain.streams.session import Dropped, StreamSession
from services.master.domain.streams.specs import MAX_FILTER_IDS, Subscription, parse_startup
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial

# On each database: the numbers come from rows as each database stores them, and bulk statements.
pytestmark = pytest.mark.on_each_database


# ---- the wire's id sets and the startup message --------------------------------------------------


def test_key_sets_parse_merge_and_encode_as_determined_writes_them() -> None:
    assert keysets.parse("", "known.projects") == []
    assert keysets.parse("5,1-3,4,9", "k") == [(1, 5), (9, 9)]
    assert keysets.encode([9, 1, 2, 3, 5]) == "1-3,5,9"
    assert keysets.encode([]) == ""
    # A huge range costs one interval; what is gone of it is computed without expanding it.
    huge = keysets.parse("1-1000000000", "k")
    assert keysets.encode_intervals(keysets.minus(huge, [2, 3, 999999999])) == "1,4-999999998,1000000000"
    assert keysets.contains(huge, 77) and not keysets.contains(huge, 1000000001)
    for bad in ("a", "5-3", "-2", "1,,2", "0", "1-2-3", "99999999999999999999"):
        with pytest.raises(InvalidArgument, match=r"known\.models"):
            keysets.parse(bad, "known.models")


def test_the_startup_message_is_checked_and_bounded_naming_the_field() -> None:
    startup = parse_startup(
        json.dumps(
            {
                "sync_id": "1",
                "known": {"projects": "1-3", "experiments": "7"},  # a kind 0.38 does not stream: ignored
                "subscribe": {
                    "projects": {"workspace_ids": [2], "project_ids": [], "since": 12},
                    "models": None,
                    "unknown_kind": {"ids": [1]},
                },
            }
        )
    )
    assert startup.sync_id == "1" and startup.known == {"projects": [(1, 3)]}
    (sub,) = startup.subscriptions
    assert sub.kind is PROJECTS and sub.since == 12 and sub.ids["workspace_id"] == {2} and not sub.ids["id"]
    refusals = {
        "not JSON": "{",
        "sync_id": {"sync_id": 3},
        "subscribe.projects.workspace_ids": {"subscribe": {"projects": {"workspace_ids": [0]}}},
        "subscribe.models.user_ids": {"subscribe": {"models": {"user_ids": "1"}}},
        "subscribe.projects.since": {"subscribe": {"projects": {"since": -1}}},
        "subscribe.modelversions.model_ids: more than": {
            "subscribe": {"modelversions": {"model_ids": list(range(1, MAX_FILTER_IDS + 2))}}
        },
        "known.projects": {"known": {"projects": 5}},
        "over": "x" * (1024 * 1024 + 1),
    }
    for field, message in refusals.items():
        text = message if isinstance(message, str) else json.dumps(message)
        with pytest.raises(InvalidArgument, match=field):
            parse_startup(text)


# ---- changes, as units of work commit them ---------------------------------------------------------


class Listener:
    """A subscriber on a publisher fed by the master's units of work."""

    def __init__(
        self, publisher: Publisher, *subscriptions: Subscription, reader: Principal | None = None
    ) -> None:
        self.wakes = 0
        principal = reader or Principal(user_id=2, username="determined")
        self.subscriber = Subscriber(lambda ws: principal.user_id is not None, self._wake)
        self.subscriber.subscribe(subscriptions)
        publisher.add(self.subscriber)

    def _wake(self) -> None:
        self.wakes += 1

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(q.text) for q in self.subscriber.take()]


@pytest.fixture
def publisher(master: Master) -> Iterator[Publisher]:
    publisher = Publisher()
    changes = StreamChanges(master.db, publisher)
    try:
        yield publisher
    finally:
        changes.stop()


def _sub(kind: Any, **ids: list[int]) -> Subscription:
    by_field = {
        message_field: frozenset(ids.get(spec_field, []))
        for spec_field, message_field in kind.filters.items()
    }
    return Subscription(kind, by_field)


def _workspace(master: Master, name: str) -> int:
    with master.ctx.unit_of_work() as w:
        return workspaces.create_workspace(master.ctx, w, master.admin, name, workspaces.WorkspaceSettings())


def _project(master: Master, workspace_id: int, name: str) -> int:
    with master.ctx.unit_of_work() as w:
        return workspaces.create_project(w, master.admin, workspace_id, name, None, None)


def test_project_changes_reach_the_subscribers_whose_filter_matches(
    master: Master, publisher: Publisher
) -> None:
    vision, audio = _workspace(master, "vision"), _workspace(master, "audio")
    by_workspace = Listener(publisher, _sub(PROJECTS, workspace_ids=[vision]))
    everything = Listener(publisher, _sub(PROJECTS, workspace_ids=[vision, audio]))

    detection = _project(master, vision, "detection")
    _project(master, audio, "speech")
    (created,) = by_workspace.messages()
    project = created["project"]
    assert project["id"] == detection and project["name"] == "detection" and project["workspace_id"] == vision
    assert project["state"] == "UNSPECIFIED" and project["seq"] > 0 and project["created_at"].endswith("Z")
    assert set(project) == {
        "id", "name", "description", "archived", "created_at", "notes", "workspace_id", "user_id",
        "immutable", "state", "key", "seq",
    }  # fmt: skip
    assert by_workspace.wakes == 1
    assert [m["project"]["name"] for m in everything.messages()] == ["detection", "speech"]

    with master.ctx.unit_of_work() as w:
        workspaces.patch_project(w, master.admin, detection, workspaces.ProjectEdit(name="boxes"))
    (renamed,) = by_workspace.messages()
    assert renamed["project"]["name"] == "boxes" and renamed["project"]["seq"] > project["seq"]
    with master.db.read() as s:
        assert s.get_one(models.Project, detection).seq == renamed["project"]["seq"]  # as stored

    assert workspace_deletion.delete_project(master.ctx, master.admin, detection)
    assert by_workspace.messages() == [{"projects_deleted": str(detection)}]
    # An unrelated change wakes nobody.
    wakes = by_workspace.wakes
    _project(master, audio, "music")
    assert by_workspace.messages() == [] and by_workspace.wakes == wakes


def test_a_rolled_back_unit_publishes_nothing_and_a_quiet_publisher_still_numbers(
    master: Master, publisher: Publisher
) -> None:
    vision = _workspace(master, "vision")
    # Nobody listens: rows are numbered all the same, so a later client's `since` stays true.
    first = _project(master, vision, "first")
    with master.db.read() as s:
        numbered = s.get_one(models.Project, first).seq
    assert numbered > 0
    listener = Listener(publisher, _sub(PROJECTS, workspace_ids=[vision]))
    with pytest.raises(RuntimeError), master.ctx.unit_of_work() as w:
        workspaces.create_project(w, master.admin, vision, "never", None, None)
        raise RuntimeError("the unit fails")
    assert listener.messages() == []
    second = _project(master, vision, "second")
    (message,) = listener.messages()
    assert message["project"]["id"] == second and message["project"]["seq"] > numbered


def test_bulk_statements_are_seen_as_the_orm_is(master: Master, publisher: Publisher) -> None:
    vision = _workspace(master, "vision")
    a, b = _project(master, vision, "a"), _project(master, vision, "b")
    listener = Listener(publisher, _sub(PROJECTS, project_ids=[a, b]))
    with master.ctx.unit_of_work() as w:
        w.session.execute(update(models.Project).where(models.Project.id == a).values(description="bulk"))
    (changed,) = listener.messages()
    assert changed["project"]["description"] == "bulk"
    # The workspace's deletion removes its projects with one DELETE: each is named.
    assert workspace_deletion.delete_workspace(master.ctx, master.admin, vision)
    deleted = sorted(m["projects_deleted"] for m in listener.messages())
    assert deleted == sorted([str(a), str(b)])


def test_a_model_moved_out_of_a_subscription_reaches_it_as_a_deletion(
    master: Master, publisher: Publisher
) -> None:
    vision, audio = _workspace(master, "vision"), _workspace(master, "audio")
    in_vision = Listener(publisher, _sub(MODELS, workspace_ids=[vision]))
    in_audio = Listener(publisher, _sub(MODELS, workspace_ids=[audio]))
    with master.ctx.unit_of_work() as w:
        model_id = model_registry.create_model(
            master.ctx,
            w,
            master.admin,
            model_registry.NewModel(name="mnist", workspace_id=vision, labels=["a"]),
        )
    (created,) = in_vision.messages()
    assert created["model"]["id"] == model_id and created["model"]["labels"] == ["a"]
    assert set(created["model"]) == {
        "id", "name", "description", "archived", "creation_time", "notes", "workspace_id", "user_id",
        "last_updated_time", "metadata", "labels", "seq",
    }  # fmt: skip
    assert in_audio.messages() == []
    with master.ctx.unit_of_work() as w:
        model_registry.patch_model(
            master.ctx, w, master.admin, "mnist", model_registry.ModelEdit(workspace_id=audio)
        )
    assert in_vision.messages() == [{"models_deleted": str(model_id)}]
    (moved,) = in_audio.messages()
    assert moved["model"]["workspace_id"] == audio
    with master.ctx.unit_of_work() as w:
        model_registry.delete_model(master.ctx, w, master.admin, "mnist")
    assert in_audio.messages() == [{"models_deleted": str(model_id)}] and in_vision.messages() == []


def test_a_reader_without_a_user_session_is_sent_nothing(master: Master, publisher: Publisher) -> None:
    vision = _workspace(master, "vision")
    trial_code = Listener(
        publisher, _sub(PROJECTS, workspace_ids=[vision]), reader=Principal(allocation_id="a.1")
    )
    _project(master, vision, "secret")
    assert trial_code.messages() == []


# ---- a connection's conversation: the sync, then the changes ----------------------------------------


def _startup(sync_id: str, known: dict[str, str], **subscribe: dict[str, Any]) -> str:
    return json.dumps({"sync_id": sync_id, "known": known, "subscribe": subscribe})


def _pages(session: StreamSession, text: str) -> list[dict[str, Any]]:
    return [json.loads(m) for page in session.start(text) for m in page]


def test_a_sync_sends_what_the_client_lacks_and_names_what_it_knows_that_is_gone(
    master: Master, publisher: Publisher
) -> None:
    vision, audio = _workspace(master, "vision"), _workspace(master, "audio")
    a, b = _project(master, vision, "a"), _project(master, vision, "b")
    elsewhere = _project(master, audio, "elsewhere")
    user = Principal(user_id=2, username="determined")
    session = StreamSession(master.db, publisher, user, lambda: None)
    try:
        first = _pages(session, _startup("1", {}, projects={"workspace_ids": [vision]}))
        assert first[0] == {"sync_id": "1", "complete": False} and first[-1] == {
            "sync_id": "1",
            "complete": True,
        }
        assert first[1] == {"projects_deleted": ""}
        assert [m["project"]["id"] for m in first[2:-1]] == [a, b]  # not the other workspace's
        seq_b = first[3]["project"]["seq"]

        # Reconnected knowing a, b and a project since deleted; b changed after the `since` it sends.
        with master.ctx.unit_of_work() as w:
            workspaces.patch_project(w, master.admin, b, workspaces.ProjectEdit(description="new"))
        since = first[2]["project"]["seq"]
        assert seq_b > since
        again = _pages(
            session,
            _startup(
                "2",
                {"projects": f"{a}-{b},{elsewhere + 50}"},
                projects={"workspace_ids": [vision], "since": seq_b},
            ),
        )
        assert again[1] == {"projects_deleted": str(elsewhere + 50)}
        assert [(m["project"]["id"], m["project"]["description"]) for m in again[2:-1]] == [(b, "new")]
        # The change that the sync already sent is not sent twice; later ones are.
        assert session.pending() == []
        _project(master, vision, "c")
        assert [json.loads(t)["project"]["name"] for t in session.pending()] == ["c"]

        # An empty subscription: everything known is gone from the client's view.
        empty = _pages(session, _startup("3", {"projects": f"{a},{b}"}, projects={}))
        assert empty[1:-1] == [{"projects_deleted": f"{a}-{b}" if b == a + 1 else f"{a},{b}"}]
        _project(master, vision, "d")
        assert session.pending() == []
    finally:
        session.close()
    assert publisher.count() == 0


def test_a_role_taken_away_applies_to_a_stream_already_open(master: Master, publisher: Publisher) -> None:
    ctx, admin = master.ctx, master.admin
    (everyone,) = groups.listing(master.db, groups.GroupQuery(name="everyone"))[0]
    groups.delete_group(ctx, admin, everyone.id)  # no default roles: the viewer's is its only one
    vision = _workspace(master, "vision")
    viewer = master.add_user("viewer")
    viewing = Requested(Assignment(roles.VIEWER.id, user_id=viewer.user_id, workspace_id=vision), "a")
    role_assignments.assign(ctx, admin, [viewing])
    cache = GrantCache(master.db, lambda: ctx.access_version)
    session = StreamSession(master.db, publisher, viewer, lambda: None, cache.attach)
    try:
        _pages(session, _startup("1", {}, projects={"workspace_ids": [vision]}))
        _project(master, vision, "seen")
        assert [json.loads(t)["project"]["name"] for t in session.pending()] == ["seen"]
        role_assignments.remove(ctx, admin, [viewing])
        _project(master, vision, "hidden")
        assert session.pending() == []
    finally:
        session.close()


def test_a_client_that_falls_behind_is_dropped_and_its_queue_stays_bounded(
    master: Master, publisher: Publisher
) -> None:
    vision = _workspace(master, "vision")
    session = StreamSession(master.db, publisher, Principal(user_id=2), lambda: None)
    session.subscriber._max_messages = 3
    try:
        _pages(session, _startup("1", {}, projects={"workspace_ids": [vision]}))
        for i in range(5):
            _project(master, vision, f"p{i}")
        assert session.subscriber.take() == []  # dropped: nothing is held for it any more
        with pytest.raises(Dropped, match="too slow: over 3 messages"):
            session.pending()
    finally:
        session.close()
    small = Publisher(max_subscribers=1)
    small.add(Subscriber(lambda ws: True, lambda: None))
    with pytest.raises(TooManySubscribers):
        small.add(Subscriber(lambda ws: True, lambda: None))


def test_seq_carries_on_from_the_highest_stored_after_a_restart(master: Master) -> None:
    vision = _workspace(master, "vision")
    changes = StreamChanges(master.db, Publisher())
    try:
        _project(master, vision, "a")
    finally:
        changes.stop()
    with master.db.read() as s:
        highest = max(s.scalars(select(models.Project.seq)))
    restarted = StreamChanges(master.db, Publisher())
    try:
        assert restarted.counter.last == highest
        b = _project(master, vision, "b")
        with master.db.read() as s:
            assert s.get_one(models.Project, b).seq == highest + 1
    finally:
        restarted.stop()


def test_model_versions_stream_with_their_models_workspace(
    master: Master, publisher: Publisher, tmp_path: Path
) -> None:
    trial = Trial(master, tmp_path / "storage")
    checkpoint = trial.checkpoint(3)
    vision = _workspace(master, "vision")
    with master.ctx.unit_of_work() as w:
        model_id = model_registry.create_model(
            master.ctx, w, master.admin, model_registry.NewModel(name="mnist", workspace_id=vision)
        )
    versions = Listener(publisher, _sub(MODEL_VERSIONS, model_ids=[model_id]))
    other_model = Listener(publisher, _sub(MODEL_VERSIONS, model_ids=[model_id + 1]))
    model_registry.register_version(
        master.ctx, master.admin, "mnist", model_registry.NewVersion(checkpoint_uuid=checkpoint)
    )
    (registered,) = versions.messages()
    version = registered["modelversion"]
    assert (version["model_id"], version["version"], version["checkpoint_uuid"]) == (model_id, 1, checkpoint)
    assert version["workspace_id"] == str(vision)  # a string, as Determined's ModelVersionMsg has it
    assert set(version) == {
        "id", "name", "version", "checkpoint_uuid", "creation_time", "last_updated_time", "metadata",
        "model_id", "user_id", "comment", "labels", "notes", "workspace_id", "seq",
    }  # fmt: skip
    assert other_model.messages() == []
    # One version deleted (the ORM's delete), then the model with its versions (a bulk DELETE).
    model_registry.register_version(
        master.ctx, master.admin, "mnist", model_registry.NewVersion(checkpoint_uuid=checkpoint)
    )
    (second,) = versions.messages()
    with master.ctx.unit_of_work() as w:
        model_registry.delete_version(master.ctx, w, master.admin, "mnist", 1)
    assert versions.messages() == [{"modelversions_deleted": str(version["id"])}]
    with master.ctx.unit_of_work() as w:
        model_registry.delete_model(master.ctx, w, master.admin, "mnist")
    assert versions.messages() == [{"modelversions_deleted": str(second["modelversion"]["id"])}]
