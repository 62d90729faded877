"""The metrics table without its foreign key to trials.

PostgreSQL checks a foreign key once per inserted row (a lookup and a share lock on the trial, for
each of the thousands of rows a batch brings): two fifths of the database's work for a COPY of
2,000 reports. Intake now locks the trial's row once per batch instead (FOR KEY SHARE, taken when
it reads the trial), and deleting an experiment locks its trials before it deletes their metrics:
together they keep every metric row pointing at a trial (domain/metrics/intake.py,
domain/deletion/deletion.py).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# SQLite's foreign key has no name: the batch copy of the table gives it this one to drop it by.
_SQLITE_NAMES = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}
_SQLITE_FK = "fk_metrics_trial_id_trials"


def _trial_fks() -> list[str]:
    found = sa.inspect(op.get_bind()).get_foreign_keys("metrics")
    return [fk["name"] for fk in found if fk["referred_table"] == "trials" and fk.get("name")]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table(
            "metrics",
            recreate="always",
            naming_convention=_SQLITE_NAMES,
            table_kwargs={"sqlite_autoincrement": True},
        ) as batch:
            batch.drop_constraint(_SQLITE_FK, type_="foreignkey")
        return
    for name in _trial_fks():
        op.drop_constraint(name, "metrics", type_="foreignkey")


def downgrade() -> None:
    # Rows of trials that are gone (none, while the rules above hold) would fail the key.
    op.execute(sa.text("DELETE FROM metrics WHERE trial_id NOT IN (SELECT id FROM trials)"))
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table(
            "metrics", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ) as batch:
            batch.create_foreign_key(_SQLITE_FK, "trials", ["trial_id"], ["id"], ondelete="CASCADE")
        return
    op.create_foreign_key(None, "metrics", "trials", ["trial_id"], ["id"], ondelete="CASCADE")
