"""The statistics: one module per audit stage, pure vectorised functions of frames (no database,
no Prefect; flows.stages runs them as Prefect tasks)."""
