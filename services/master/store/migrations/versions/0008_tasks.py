"""Tasks as their own rows (Determined's `tasks` table): every allocation belongs to a task, whatever
its kind, and task logs are kept per task. Every existing trial gets its task row (id
"<experiment id>.<request id>", kind TRIAL), and its allocations and log lines point at it, so an
upgraded master shows and follows old trials exactly as before.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
# A trial's task id, written in SQL both SQLite and PostgreSQL read the same (task_ids.py).
_TRIAL_TASK_ID = "CAST(t.experiment_id AS VARCHAR(20)) || '.' || t.request_id"


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False, index=True),
        sa.Column("owner_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False, index=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("config", sa.JSON, nullable=True),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("state", sa.String(32), nullable=False, index=True),
        sa.Column("start_time", TS, nullable=False),
        sa.Column("end_time", TS, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("exit_reason", sa.Text, nullable=True),
        sa.Column("resource_pool", sa.String(255), nullable=False),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("priority", sa.Integer, nullable=True),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("workspace_id", sa.Integer, sa.ForeignKey("workspaces.id"), nullable=True, index=True),
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=True,
            index=True,
        ),
        sa.Column("parent_id", sa.String(128), nullable=True),
        sa.Column("forked_from", sa.String(128), nullable=True),
        sa.Column("no_pause", sa.Boolean, nullable=False),
    )
    op.create_table(
        "task_contexts",
        sa.Column("task_id", sa.String(128), sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("archive", sa.LargeBinary, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
    )
    # Existing trials become tasks; a trial still running is an ACTIVE task.
    op.execute(
        sa.text(
            "INSERT INTO tasks (id, kind, owner_id, description, config, job_id, state, start_time, "
            "end_time, exit_code, exit_reason, resource_pool, slots, priority, run_id, workspace_id, "
            "project_id, experiment_id, parent_id, forked_from, no_pause) "
            f"SELECT {_TRIAL_TASK_ID}, 'TRIAL', e.owner_id, "
            "'Trial ' || CAST(t.id AS VARCHAR(20)) || ' (Experiment ' || CAST(e.id AS VARCHAR(20)) || ')', "
            "NULL, 'exp-' || CAST(e.id AS VARCHAR(20)), "
            "CASE WHEN t.state IN ('COMPLETED', 'CANCELED', 'ERROR') THEN t.state ELSE 'ACTIVE' END, "
            "t.start_time, t.end_time, NULL, NULL, e.resource_pool, 0, NULL, t.run_id, p.workspace_id, "
            "e.project_id, e.id, NULL, NULL, :no "
            "FROM trials t JOIN experiments e ON e.id = t.experiment_id "
            "LEFT JOIN projects p ON p.id = e.project_id"
        ).bindparams(no=False)
    )
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("task_id", sa.String(128), nullable=True))
        batch.add_column(sa.Column("proxy_address", sa.String(255), nullable=True))
    op.execute(
        sa.text(
            f"UPDATE allocations SET task_id = (SELECT {_TRIAL_TASK_ID} FROM trials t "
            "WHERE t.id = allocations.trial_id)"
        )
    )
    with op.batch_alter_table("allocations") as batch:
        batch.alter_column("task_id", existing_type=sa.String(128), nullable=False)
        batch.alter_column("trial_id", existing_type=sa.Integer, nullable=True)
        batch.create_foreign_key(
            "fk_allocations_task_id_tasks", "tasks", ["task_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_allocations_task_id", ["task_id"])
    # Keep "never reused" ids when SQLite rebuilds the table.
    with op.batch_alter_table("task_logs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("task_id", sa.String(128), nullable=True))
    op.execute(
        sa.text(
            f"UPDATE task_logs SET task_id = (SELECT {_TRIAL_TASK_ID} FROM trials t "
            "WHERE t.id = task_logs.trial_id)"
        )
    )
    # Lines of trials deleted since (never cleaned up by an older master) have no task left.
    op.execute(sa.text("DELETE FROM task_logs WHERE task_id IS NULL"))
    with op.batch_alter_table("task_logs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.alter_column("task_id", existing_type=sa.String(128), nullable=False)
        batch.alter_column("trial_id", existing_type=sa.Integer, nullable=True)
        batch.create_index("ix_task_logs_task_id_id", ["task_id", "id"])


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM task_logs WHERE trial_id IS NULL"))
    with op.batch_alter_table("task_logs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_index("ix_task_logs_task_id_id")
        batch.alter_column("trial_id", existing_type=sa.Integer, nullable=False)
        batch.drop_column("task_id")
    # Tasks that are not trials have no place in the older schema: their rows go.
    op.execute(
        sa.text(
            "DELETE FROM containers WHERE allocation_id IN "
            "(SELECT id FROM allocations WHERE trial_id IS NULL)"
        )
    )
    op.execute(sa.text("DELETE FROM allocations WHERE trial_id IS NULL"))
    with op.batch_alter_table("allocations") as batch:
        batch.drop_index("ix_allocations_task_id")
        batch.drop_constraint("fk_allocations_task_id_tasks", type_="foreignkey")
        batch.alter_column("trial_id", existing_type=sa.Integer, nullable=False)
        batch.drop_column("proxy_address")
        batch.drop_column("task_id")
    op.drop_table("task_contexts")
    op.drop_table("tasks")
