"""Runs and bulk experiment actions, on both databases: each id acted on through the lifecycle
functions under its own access check, a failing id reported without stopping the others; the run
filter bounded and refused where it names what Cairn does not know; the run table, a run's
metadata, and a project's columns."""

from __future__ import annotations

import json

import pytest

from services.common.principal import Principal
from services.master.domain.experiments import bulk_actions, experiments, run_actions
from services.master.domain.experiments.bulk_actions import BulkFilters
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.reads import project_columns, runs
from services.master.domain.reads.run_filter import MAX_DEPTH, MAX_LEAVES, parse_run_filter
from services.master.domain.trials import run_metadata
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.unit.master.domain.harness import Master

# On both databases: the run filter is SQL over JSON hyperparameters and casts.
pytestmark = pytest.mark.on_each_database

UNCATEGORIZED = models.UNCATEGORIZED_PROJECT_ID


def _field(
    column: str, operator: str, value: object, location: str = "LOCATION_TYPE_RUN"
) -> dict[str, object]:
    return {"kind": "field", "columnName": column, "location": location, "operator": operator, "value": value}


def _filter(*children: dict[str, object], conjunction: str = "and", show_archived: bool = False) -> str:
    group = {"kind": "group", "conjunction": conjunction, "children": list(children)}
    return json.dumps({"filterGroup": group, "showArchived": show_archived})


def _errors(results: list[bulk_actions.ActionResult]) -> dict[int, str]:
    return {r.id: r.error for r in results}


def _new_project(master: Master, name: str) -> int:
    with master.ctx.unit_of_work() as w:
        workspace_id = workspaces.create_workspace(
            master.ctx, w, master.admin, f"ws-{name}", workspaces.WorkspaceSettings()
        )
        return workspaces.create_project(w, master.admin, workspace_id, name, None, None)


def _end(master: Master, experiment_id: int) -> None:
    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    assert master.experiment(experiment_id).state == "CANCELED"


def test_bulk_kill_by_ids_reports_each_id_and_stops_none_for_another(master: Master) -> None:
    mine, theirs = master.create(), master.create()
    other_user = master.add_user("someone")
    results = bulk_actions.act(master.ctx, other_user, "kill", UNCATEGORIZED, [mine, 999_999])
    errors = _errors(results)
    assert "belongs to another user" in errors[mine]
    assert "not found" in errors[999_999]
    assert master.experiment(mine).state == "ACTIVE"  # refused: nothing changed

    results = bulk_actions.act(master.ctx, master.admin, "kill", UNCATEGORIZED, [mine, theirs, 999_999])
    errors = _errors(results)
    assert errors[mine] == errors[theirs] == ""
    assert "not found" in errors[999_999]
    master.settle()
    for experiment_id in (mine, theirs):
        assert master.experiment(experiment_id).state == "CANCELED"  # never placed: ended at once
    # A kill of an ended experiment is no error (Determined's rule).
    assert _errors(bulk_actions.act(master.ctx, master.admin, "kill", UNCATEGORIZED, [mine])) == {mine: ""}


def test_bulk_pause_and_activate_by_filters_select_by_state(master: Master) -> None:
    first, second = master.create(), master.create()
    ids = bulk_actions.select_by_filters(master.ctx, UNCATEGORIZED, BulkFilters(), "pause")
    assert ids == [first, second]
    assert _errors(bulk_actions.act(master.ctx, master.admin, "pause", UNCATEGORIZED, ids)) == {
        first: "",
        second: "",
    }
    assert {master.experiment(i).state for i in (first, second)} == {"PAUSED"}
    # Activate's filter picks the paused ones; the name filter narrows it to one.
    ids = bulk_actions.select_by_filters(
        master.ctx, UNCATEGORIZED, BulkFilters(excluded_ids=(second,)), "activate"
    )
    assert ids == [first]
    bulk_actions.act(master.ctx, master.admin, "activate", UNCATEGORIZED, ids)
    assert (master.experiment(first).state, master.experiment(second).state) == ("ACTIVE", "PAUSED")
    # Another project's id finds nothing here.
    other = _new_project(master, "elsewhere")
    assert bulk_actions.select_by_filters(master.ctx, other, BulkFilters(), "kill") == []
    assert (
        "not found in project"
        in _errors(bulk_actions.act(master.ctx, master.admin, "pause", other, [first]))[first]
    )


def test_bulk_archive_unarchive_delete_and_move(master: Master) -> None:
    running, ended = master.create(), master.create()
    _end(master, ended)
    errors = _errors(bulk_actions.act(master.ctx, master.admin, "archive", UNCATEGORIZED, [running, ended]))
    assert errors == {running: "Experiment is not in terminal state.", ended: ""}
    assert master.experiment(ended).archived and not master.experiment(running).archived
    errors = _errors(bulk_actions.act(master.ctx, master.admin, "archive", UNCATEGORIZED, [ended]))
    assert errors == {ended: "Experiment is already archived."}
    assert bulk_actions.select_by_filters(master.ctx, UNCATEGORIZED, BulkFilters(), "unarchive") == [ended]
    bulk_actions.act(master.ctx, master.admin, "unarchive", UNCATEGORIZED, [ended])
    assert not master.experiment(ended).archived

    destination = _new_project(master, "moved-here")
    errors = _errors(
        bulk_actions.move(master.ctx, master.admin, UNCATEGORIZED, [running, 424242], destination)
    )
    assert errors[running] == "" and "not found" in errors[424242]
    assert master.experiment(running).project_id == destination

    errors = _errors(bulk_actions.act(master.ctx, master.admin, "delete", UNCATEGORIZED, [ended]))
    assert errors == {ended: ""}
    assert master.experiment(ended).state == "DELETING"
    errors = _errors(bulk_actions.act(master.ctx, master.admin, "delete", destination, [running]))
    assert "cancel or kill it before deleting it" in errors[running]


def test_bulk_inputs_are_bounded_before_anything_changes(master: Master) -> None:
    with pytest.raises(InvalidArgument, match="experimentIds"):
        bulk_actions.check_ids(list(range(bulk_actions.MAX_EXPERIMENTS + 1)), "experimentIds")
    with pytest.raises(InvalidArgument, match=r"filters\.name"):
        bulk_actions.select_by_filters(master.ctx, UNCATEGORIZED, BulkFilters(name="x" * 5000), "kill")


def test_the_run_filter_is_bounded_and_names_what_it_refuses() -> None:
    assert parse_run_filter(_filter(_field("id", "=", 3))).root is not None
    with pytest.raises(InvalidArgument, match="not JSON"):
        parse_run_filter("{")
    with pytest.raises(InvalidArgument, match="bytes"):
        parse_run_filter(" " * (70 * 1024))
    with pytest.raises(InvalidArgument, match="does not filter runs on column 'nope'"):
        parse_run_filter(_filter(_field("nope", "=", 1)))
    with pytest.raises(InvalidArgument, match="operator"):
        parse_run_filter(_filter(_field("id", "~", 1)))
    nested: dict[str, object] = _field("id", "=", 1)
    for _ in range(MAX_DEPTH + 1):
        nested = {"kind": "group", "conjunction": "and", "children": [nested]}
    with pytest.raises(InvalidArgument, match="nest"):
        parse_run_filter(json.dumps({"filterGroup": nested}))
    with pytest.raises(InvalidArgument, match="conditions"):
        parse_run_filter(_filter(*[_field("id", "=", i) for i in range(MAX_LEAVES + 1)]))


def test_search_runs_filters_sorts_and_pages(master: Master) -> None:
    first = master.create(hyperparameters={"lr": 0.1})
    second = master.create(hyperparameters={"lr": 0.5})
    master.create(hyperparameters={"lr": "fast"})  # text: no match for a number, and no error
    (t1,) = master.trials(first)
    (t2,) = master.trials(second)
    with master.db.read() as s:
        rows, page = runs.search_runs(
            s, project_id=UNCATEGORIZED, filter_text=None, sort="id=desc", offset=0, limit=0
        )
        assert [r.trial.id for r in rows][1:] == [t2.id, t1.id] and page.total == 3
        only, _ = runs.search_runs(
            s,
            project_id=None,
            filter_text=_filter(_field("experimentId", "=", first)),
            sort=None,
            offset=0,
            limit=0,
        )
        assert [r.trial.id for r in only] == [t1.id]
        by_hp, _ = runs.search_runs(
            s,
            project_id=None,
            filter_text=_filter(_field("hp.lr", ">", 0.3, "LOCATION_TYPE_RUN_HYPERPARAMETERS")),
            sort=None,
            offset=0,
            limit=0,
        )
        assert [r.trial.id for r in by_hp] == [t2.id]
        by_text, _ = runs.search_runs(
            s,
            project_id=None,
            filter_text=_filter(
                _field("experimentName", "contains", "dom"), _field("id", "contains", str(t1.id))
            ),
            sort=None,
            offset=0,
            limit=0,
        )
        assert t1.id in [r.trial.id for r in by_text]
        either, _ = runs.search_runs(
            s,
            project_id=None,
            filter_text=_filter(_field("id", "=", t1.id), _field("id", "=", t2.id), conjunction="or"),
            sort=None,
            offset=1,
            limit=1,
        )
        assert [r.trial.id for r in either] == [t2.id]
        with pytest.raises(InvalidArgument, match="sort"):
            runs.search_runs(s, project_id=None, filter_text=None, sort="id=sideways", offset=0, limit=0)
        with pytest.raises(NotFound):
            runs.search_runs(s, project_id=987654, filter_text=None, sort=None, offset=0, limit=0)


def test_run_actions_act_through_the_trial_and_its_experiment(master: Master) -> None:
    single = master.create()
    (run,) = master.trials(single)
    by_filter = run_actions.select_runs(
        master.ctx,
        project_id=UNCATEGORIZED,
        run_ids=[],
        filter_text=_filter(_field("experimentId", "=", single)),
    )
    assert by_filter.ids == [run.id]
    with pytest.raises(InvalidArgument, match="run id list must be empty"):
        run_actions.select_runs(master.ctx, project_id=None, run_ids=[run.id], filter_text=_filter())

    errors = _errors(
        run_actions.pause_or_resume(master.ctx, master.admin, by_filter, UNCATEGORIZED, pause=True)
    )
    assert errors == {run.id: ""}
    assert master.experiment(single).state == "PAUSED"
    run_actions.pause_or_resume(master.ctx, master.admin, by_filter, UNCATEGORIZED, pause=False)
    assert master.experiment(single).state == "ACTIVE"

    errors = _errors(
        run_actions.set_archived(master.ctx, master.admin, by_filter, UNCATEGORIZED, archived=True)
    )
    assert errors == {run.id: "Run is not in terminal state."}
    missing = run_actions.RunSelection(ids=[run.id, 777_777], by_filter=False)
    errors = _errors(run_actions.kill(master.ctx, master.admin, missing, None))
    assert errors[run.id] == "" and errors[777_777] == "Run with id '777777' not found"
    master.settle()
    # Never placed (no agent here), the killed run ends at once; an ended run may be archived.
    assert master.trials(single)[0].state == "CANCELED"
    errors = _errors(
        run_actions.set_archived(master.ctx, master.admin, by_filter, UNCATEGORIZED, archived=True)
    )
    assert errors == {run.id: ""}
    assert master.trials(single)[0].archived
    with master.db.read() as s:
        hidden, _ = runs.search_runs(
            s, project_id=UNCATEGORIZED, filter_text=_filter(), sort=None, offset=0, limit=0
        )
        assert run.id not in [r.trial.id for r in hidden]
        shown, _ = runs.search_runs(
            s, project_id=UNCATEGORIZED, filter_text=_filter(show_archived=True), sort=None, offset=0, limit=0
        )
        assert run.id in [r.trial.id for r in shown]
    # A run moves with its experiment.
    destination = _new_project(master, "runs-here")
    run_actions.set_archived(master.ctx, master.admin, by_filter, UNCATEGORIZED, archived=False)
    errors = _errors(
        run_actions.move(
            master.ctx, master.admin, by_filter, UNCATEGORIZED, destination, skip_multitrial=False
        )
    )
    assert errors == {run.id: ""}
    assert master.experiment(single).project_id == destination


def test_a_run_is_deleted_with_its_single_trial_experiment_only(master: Master) -> None:
    single = master.create()
    search = master.create(
        searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
        hyperparameters={"lr": {"type": "categorical", "vals": [0.1, 0.2]}},
    )
    _end(master, single)
    _end(master, search)
    (run,) = master.trials(single)
    first, _second = master.trials(search)
    selection = run_actions.RunSelection(ids=[run.id, first.id], by_filter=False)
    errors = _errors(run_actions.delete(master.ctx, master.admin, selection, UNCATEGORIZED))
    assert errors[run.id] == ""
    assert "shares experiment" in errors[first.id]
    assert master.experiment(single).state == "DELETING"
    assert master.experiment(search).state == "CANCELED"
    # Pausing a run of a search is refused as Determined refuses it.
    errors = _errors(
        run_actions.pause_or_resume(
            master.ctx, master.admin, run_actions.RunSelection([first.id], False), UNCATEGORIZED, pause=True
        )
    )
    assert "part of multi-trial" in errors[first.id]


def test_run_metadata_is_replaced_by_its_owner_and_read_by_anyone(master: Master) -> None:
    experiment_id = master.create()
    (run,) = master.trials(experiment_id)
    assert run_metadata.get_metadata(master.ctx, master.admin, run.id) is None
    run_metadata.set_metadata(master.ctx, master.admin, run.id, {"a": {"b": 1}})
    run_metadata.set_metadata(master.ctx, master.admin, run.id, {"c": "d"})
    stranger = master.add_user("stranger")
    assert run_metadata.get_metadata(master.ctx, stranger, run.id) == {"c": "d"}
    with pytest.raises(PermissionDenied):
        run_metadata.set_metadata(master.ctx, stranger, run.id, {"x": 1})
    with pytest.raises(InvalidArgument, match="metadata"):
        run_metadata.set_metadata(master.ctx, master.admin, run.id, {"big": "x" * (300 * 1024)})
    with pytest.raises(NotFound):
        run_metadata.get_metadata(master.ctx, master.admin, 999_999)
    assert run_metadata.get_metadata(master.ctx, master.admin, run.id) == {"c": "d"}


def test_project_columns_offer_general_hyperparameter_and_metric_columns(master: Master) -> None:
    experiment_id = master.create(hyperparameters={"lr": 0.1, "model": {"kind": "mlp"}})
    (run,) = master.trials(experiment_id)
    master.report(run.id, 1, "validation", 1, 1, loss=0.5)
    with master.db.read() as s:
        columns = project_columns.project_columns(s, UNCATEGORIZED, runs=False)
        by_name = {(c.column, c.location): c.type for c in columns}
        assert by_name[("id", "EXPERIMENT")] == "NUMBER"
        assert by_name[("hp.lr", "HYPERPARAMETERS")] == "NUMBER"
        assert by_name[("hp.model.kind", "HYPERPARAMETERS")] == "TEXT"
        for aggregate in ("last", "max", "mean", "min"):
            assert by_name[(f"validation.loss.{aggregate}", "VALIDATIONS")] == "NUMBER"
        run_columns = project_columns.project_columns(s, UNCATEGORIZED, runs=True)
        assert ("hp.lr", "RUN_HYPERPARAMETERS") in {(c.column, c.location) for c in run_columns}
        with pytest.raises(NotFound):
            project_columns.project_columns(s, 4242, runs=False)


def test_bulk_actions_check_access_per_id(master: Master) -> None:
    owner = master.add_user("owner")
    experiment_id = master.create()
    stranger: Principal = master.add_user("stranger2")
    assert owner.user_id != stranger.user_id
    errors = _errors(bulk_actions.act(master.ctx, stranger, "archive", UNCATEGORIZED, [experiment_id]))
    assert "belongs to another user" in errors[experiment_id]


def test_experiments_search_filters_over_experiment_columns(master: Master) -> None:
    first, second = master.create(), master.create(name="other")
    filter_text = _filter(_field("name", "contains", "oth", "LOCATION_TYPE_EXPERIMENT"))
    with master.db.read() as s:
        ids, page = runs.search_experiment_ids(
            s, project_id=UNCATEGORIZED, filter_text=filter_text, sort="id=desc", offset=0, limit=0
        )
        assert (ids, page.total) == ([second], 1)
        ids, _ = runs.search_experiment_ids(
            s, project_id=None, filter_text=None, sort="id=desc", offset=0, limit=0
        )
        assert ids == [second, first]
        hp = _filter(_field("hp.lr", ">", 1, "LOCATION_TYPE_RUN_HYPERPARAMETERS"))
        with pytest.raises(InvalidArgument, match="does not filter experiments"):
            runs.search_experiment_ids(s, project_id=None, filter_text=hp, sort=None, offset=0, limit=0)
        with pytest.raises(InvalidArgument, match="does not sort experiments"):
            runs.search_experiment_ids(
                s, project_id=None, filter_text=None, sort="nope=asc", offset=0, limit=0
            )


def test_an_unexpected_failure_is_that_ids_error_and_the_others_go_on(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken, fine = master.create(), master.create()
    real_pause = experiments.pause

    def pause(ctx, w, exp):  # type: ignore[no-untyped-def]
        if exp.id == broken:
            raise RuntimeError("disk on fire")
        real_pause(ctx, w, exp)

    monkeypatch.setattr(experiments, "pause", pause)
    errors = _errors(bulk_actions.act(master.ctx, master.admin, "pause", UNCATEGORIZED, [broken, fine]))
    assert errors == {broken: f"internal error: experiment {broken} was not changed", fine: ""}
    assert (master.experiment(broken).state, master.experiment(fine).state) == ("ACTIVE", "PAUSED")
