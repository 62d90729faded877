"""Initial schema: users and sessions, experiments, model definitions, searcher snapshots and events,
trials, allocations and containers, agents and slots.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "cluster_info",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("cluster_id", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("username", sa.String(255), nullable=False, unique=True),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("display_name", sa.String(255), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("modified_at", TS, nullable=False),
        sa.Column("last_auth_at", TS, nullable=True),
    )
    op.create_table(
        "user_sessions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
    )
    op.create_index("ix_user_sessions_user_id", "user_sessions", ["user_id"])
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("archived", sa.Boolean, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("original_config", sa.Text, nullable=False),
        sa.Column("owner_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("start_time", TS, nullable=False),
        sa.Column("end_time", TS, nullable=True),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("resource_pool", sa.String(255), nullable=False),
        sa.Column("searcher_session_id", sa.String(64), nullable=False),
        sa.Column("model_definition_size", sa.Integer, nullable=False),
        sa.Column("notes", sa.Text, nullable=False),
        sa.Column("parent_id", sa.Integer, nullable=True),
        sa.Column("checkpoint_gc_done", sa.Boolean, nullable=False),
    )
    op.create_index("ix_experiments_state", "experiments", ["state"])
    op.create_index("ix_experiments_owner_id", "experiments", ["owner_id"])
    op.create_table(
        "model_definitions",
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("archive", sa.LargeBinary, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
    )
    op.create_table(
        "searcher_snapshots",
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "searcher_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_searcher_events_experiment_id", "searcher_events", ["experiment_id"])
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("hparams", sa.JSON, nullable=False),
        sa.Column("seed", sa.BigInteger, nullable=False),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("start_time", TS, nullable=False),
        sa.Column("end_time", TS, nullable=True),
        sa.Column("total_batches", sa.BigInteger, nullable=False),
        sa.Column("searcher_target", sa.BigInteger, nullable=False),
        sa.Column("searcher_stopped", sa.Boolean, nullable=False),
        sa.Column("early_exit_reason", sa.String(64), nullable=True),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("latest_checkpoint_uuid", sa.String(64), nullable=True),
        sa.Column("searcher_metric_value", sa.Float, nullable=True),
        sa.Column("summary_metrics", sa.JSON, nullable=False),
        sa.Column("searcher_completed_length", sa.BigInteger, nullable=False),
        sa.Column("best_validation_id", sa.BigInteger, nullable=True),
        sa.Column("latest_validation_id", sa.BigInteger, nullable=True),
        sa.UniqueConstraint("experiment_id", "request_id", name="uq_trials_experiment_request"),
    )
    op.create_index("ix_trials_experiment_id", "trials", ["experiment_id"])
    op.create_index("ix_trials_state", "trials", ["state"])
    op.create_table(
        "allocations",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("resource_pool", sa.String(255), nullable=False),
        sa.Column("priority", sa.Integer, nullable=True),
        sa.Column("requested_at", TS, nullable=False),
        sa.Column("assigned_at", TS, nullable=True),
        sa.Column("start_time", TS, nullable=True),
        sa.Column("end_time", TS, nullable=True),
        sa.Column("placements", sa.JSON, nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("exit_reason", sa.Text, nullable=True),
        sa.Column("failure_type", sa.String(32), nullable=False),
        sa.Column("preempt_requested", sa.Boolean, nullable=False),
        sa.Column("preempt_reason", sa.String(255), nullable=False),
        sa.Column("preempt_acked", sa.Boolean, nullable=False),
        sa.Column("kill_requested", sa.Boolean, nullable=False),
        sa.Column("kill_deadline", TS, nullable=True),
        sa.Column("is_ready", sa.Boolean, nullable=False),
    )
    op.create_index("ix_allocations_trial_id", "allocations", ["trial_id"])
    op.create_index("ix_allocations_state", "allocations", ["state"])
    op.create_index("ix_allocations_token_hash", "allocations", ["token_hash"])
    op.create_index("ix_allocations_trial_state", "allocations", ["trial_id", "state"])
    op.create_table(
        "containers",
        sa.Column("id", sa.String(160), primary_key=True),
        sa.Column(
            "allocation_id",
            sa.String(128),
            sa.ForeignKey("allocations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("slot_ids", sa.JSON, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("acked_seq", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_containers_allocation_id", "containers", ["allocation_id"])
    op.create_index("ix_containers_agent_id", "containers", ["agent_id"])
    op.create_table(
        "agents",
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("resource_pool", sa.String(255), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("draining", sa.Boolean, nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("addresses", sa.JSON, nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("runtime", sa.String(32), nullable=False),
        sa.Column("registered_time", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.Column("connected", sa.Boolean, nullable=False),
    )
    op.create_table(
        "agent_slots",
        sa.Column(
            "agent_id", sa.String(255), sa.ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("slot_id", sa.String(32), primary_key=True),
        sa.Column("device_type", sa.String(16), nullable=False),
        sa.Column("brand", sa.String(255), nullable=False),
        sa.Column("uuid", sa.String(64), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger, nullable=False),
        sa.Column("device_index", sa.Integer, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("draining", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "agent_slots",
        "agents",
        "containers",
        "allocations",
        "trials",
        "searcher_events",
        "searcher_snapshots",
        "model_definitions",
        "experiments",
        "user_sessions",
        "users",
        "cluster_info",
    ):
        op.drop_table(table)
