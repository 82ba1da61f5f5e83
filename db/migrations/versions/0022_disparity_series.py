"""The view of each disparity over runs, for dashboards and BI tools: disparity_series, one row per
succeeded run, attribute, group, reference and metric, with detection's difference, its HDI,
adjusted p-value and flag, and, where the comparison is monitored, the monitor's alarm and
confidence sequence; the run's model version beside it.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02 18:00:00
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

DISPARITIES = """
CREATE VIEW disparity_series AS
SELECT r.audit_name, r.model_id, r.model_version, r.version, r.id AS run_id, r.as_of,
       r.window_start, r.window_end,
       d.attribute, d.group_name, d.reference, d.metric,
       d.numerator_group, d.denominator_group, d.numerator_reference, d.denominator_reference,
       d.difference, d.hdi_low, d.hdi_high, d.hdi_mass, d.p_adjusted, d.flagged,
       d.tolerance, d.alpha,
       m.alarm, m.cs_low, m.cs_high
FROM audit_runs r
JOIN detection_results d ON d.run_id = r.id
LEFT JOIN monitor_results m
  ON m.run_id = d.run_id AND m.attribute = d.attribute AND m.group_name = d.group_name
 AND m.reference = d.reference AND m.metric = d.metric
WHERE r.status = 'succeeded'
"""


def upgrade() -> None:
    op.execute(DISPARITIES)


def downgrade() -> None:
    op.execute("DROP VIEW disparity_series")
