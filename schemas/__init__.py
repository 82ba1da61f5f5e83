"""Schemas of every frame that crosses a stage boundary, and of the audit configuration."""
