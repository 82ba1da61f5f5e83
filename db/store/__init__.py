"""The audit store: what the audit writes and what history reads back.

Typed models and their migrations, runs and their versioned results, history and the queries
behind reports.
"""
