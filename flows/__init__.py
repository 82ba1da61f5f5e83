"""Prefect flows that wire the stages, the nightly deployment, backfill and the CLI."""
