"""A task's log fields (Determined's TaskLogsFields / TrialLogsFields): the distinct values its
lines carry, for log filters; followed, a new answer each time new lines add to them, until the
task ends."""

from __future__ import annotations

import threading

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.kernel.topics import trial_logs_topic
from services.master.domain.metrics.logs import (
    LogFields,
    LogFilter,
    LogStore,
    follow_log_fields,
    log_fields,
    read_logs,
)
from tests.unit.master.domain.harness import Master

# On both databases: distinct values and the literal search (strpos on PostgreSQL, instr on SQLite).
pytestmark = pytest.mark.on_each_database


def _line(container: str, seq: int, **fields: object) -> apb.LogEntry:
    return apb.LogEntry(container_id=container, seq=seq, message=f"line {seq}", **fields)  # type: ignore[arg-type]


def test_fields_are_the_distinct_values_of_the_trials_lines(master: Master) -> None:
    master.add_agent("a1")
    (trial,) = master.trials(master.create())
    allocation = master.live(trial.id)
    (container,) = master.run_containers(allocation.id)
    store = LogStore(master.ctx)
    assert log_fields(master.ctx, trial_id=trial.id) == LogFields()
    store.store(
        "a1",
        apb.LogBatch(
            entries=[
                _line(container, 1, stdtype="stdout", rank=0, source="task"),
                _line(container, 2, stdtype="stderr", rank=1, source="task"),
                _line(container, 3, stdtype="stdout", source="agent"),
            ]
        ),
    )
    fields = log_fields(master.ctx, trial_id=trial.id)
    assert fields.agent_ids == ("a1",)
    assert fields.container_ids == (container,)
    assert fields.allocation_ids == (allocation.id,)
    assert fields.rank_ids == (0, 1)
    assert fields.stdtypes == ("stderr", "stdout")
    assert fields.sources == ("agent", "task")
    # The task's own id finds the same lines; another task's has none.
    assert log_fields(master.ctx, task_id=allocation.task_id) == fields
    assert log_fields(master.ctx, task_id="no-such-task") == LogFields()


def test_followed_fields_answer_again_when_new_lines_add_to_them(master: Master) -> None:
    master.add_agent("a1")
    (trial,) = master.trials(master.create())
    (container,) = master.run_containers(master.live(trial.id).id)
    store = LogStore(master.ctx)
    store.store("a1", apb.LogBatch(entries=[_line(container, 1, stdtype="stdout")]))
    ended = threading.Event()
    answers: list[LogFields] = []
    follower = follow_log_fields(master.ctx, trial_id=trial.id, follow=True, is_done=ended.is_set)
    following = threading.Thread(target=lambda: answers.extend(follower), daemon=True)
    following.start()
    store.store("a1", apb.LogBatch(entries=[_line(container, 2, stdtype="stdout")]))  # adds nothing new
    store.store("a1", apb.LogBatch(entries=[_line(container, 3, stdtype="stderr")]))
    ended.set()
    master.ctx.topics.publish(trial_logs_topic(trial.id))
    following.join(10)
    assert not following.is_alive()
    assert answers[0].stdtypes in (("stdout",), ("stderr", "stdout"))
    assert answers[-1].stdtypes == ("stderr", "stdout")
    assert len(answers) == len(set(answers))  # an answer only when the fields changed


def test_unfollowed_fields_answer_once(master: Master) -> None:
    master.add_agent("a1")
    (trial,) = master.trials(master.create())
    answers = list(follow_log_fields(master.ctx, trial_id=trial.id, follow=False, is_done=lambda: False))
    assert answers == [LogFields()]


def test_log_search_is_a_literal_case_sensitive_substring_on_both_databases(master: Master) -> None:
    master.add_agent("a1")
    (trial,) = master.trials(master.create())
    (container,) = master.run_containers(master.live(trial.id).id)
    messages = ["This is line one", "this is line two", "done: 50% of th_s", "nothing"]
    LogStore(master.ctx).store(
        "a1",
        apb.LogBatch(
            entries=[
                apb.LogEntry(container_id=container, seq=i, message=m) for i, m in enumerate(messages, 1)
            ]
        ),
    )

    def found(text: str) -> list[str]:
        rows = read_logs(
            master.ctx,
            LogFilter(trial_id=trial.id, search_text=text),
            limit=0,
            descending=False,
            follow=False,
            is_done=lambda: True,
        )
        return [r.message for r in rows]

    assert found("this") == ["this is line two"]  # not "This ...": case counts
    assert found("^th.s") == []  # not a pattern
    assert found("50%") == ["done: 50% of th_s"] and found("th_s") == ["done: 50% of th_s"]
    assert found("line") == messages[:2]
