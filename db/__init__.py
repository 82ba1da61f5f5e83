"""The database layer: where the audit reads, where it writes, and what both share.

``db.sources`` reads an audit's source, ``db.store`` keeps its runs and results; both connect
through ``db.engine`` (the connection and its limits) and retry by ``db.retry``.
"""
