"""The view of each disparity over runs, for dashboards and BI tools: disparity_series, one row per
succeeded run, attribute, group, reference and metric that detection tested or the monitor
watched: detection's counts, difference, HDI, adjusted p-value and flag (NULL for a metric only
the monitor watches), the monitor's alarm and confidence sequence (NULL where unmonitored), and
the run's model version.

The view reads audit_runs, detection_results and monitor_results: a later migration that drops or
alters a column of theirs drops the view first and re-creates it (on PostgreSQL a DROP TABLE of
one of them needs CASCADE; on SQLite a batch alteration rebuilds the table under the view).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02 18:00:00
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

RUN = """r.audit_name, r.model_id, r.model_version, r.version, r.id AS run_id, r.as_of,
       r.window_start, r.window_end"""
SAME = """{0}.run_id = {1}.run_id AND {0}.attribute = {1}.attribute
 AND {0}.group_name = {1}.group_name AND {0}.reference = {1}.reference AND {0}.metric = {1}.metric"""
DISPARITIES = f"""
CREATE VIEW disparity_series AS
SELECT {RUN},
       d.attribute, d.group_name, d.reference, d.metric,
       d.numerator_group, d.denominator_group, d.numerator_reference, d.denominator_reference,
       d.difference, d.hdi_low, d.hdi_high, d.hdi_mass, d.p_adjusted, d.flagged,
       d.tolerance, d.alpha,
       m.alarm, m.cs_low, m.cs_high
FROM audit_runs r
JOIN detection_results d ON d.run_id = r.id
LEFT JOIN monitor_results m ON {SAME.format("m", "d")}
WHERE r.status = 'succeeded'
UNION ALL
SELECT {RUN},
       m.attribute, m.group_name, m.reference, m.metric,
       NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL,
       m.tolerance, m.alpha,
       m.alarm, m.cs_low, m.cs_high
FROM audit_runs r
JOIN monitor_results m ON m.run_id = r.id
WHERE r.status = 'succeeded'
  AND NOT EXISTS (SELECT 1 FROM detection_results d WHERE {SAME.format("d", "m")})
"""


def upgrade() -> None:
    op.execute(DISPARITIES)


def downgrade() -> None:
    op.execute("DROP VIEW disparity_series")
