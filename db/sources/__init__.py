"""The read side: an audit's source, from its catalogue to its validated cells.

The source table is found in its catalogue, its window written as SQL and read in one of three
scan modes, every row accepted or quarantined; each engine's SQL lives in its own module
(``db.sources.engines``).
"""
