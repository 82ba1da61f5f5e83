"""The statistics: one module per audit stage.

Pure vectorised functions of frames (no database, no Prefect); the audit flow calls them as they
are.
"""
