"""The input fingerprint: a hash of a window's rows by their meaning, in any order and chunks."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import numpy as np
import pandas as pd

# The hash of a missing value (None, NaN, NaT, NA), whatever the column's type.
MISSING_HASH = np.uint64(0x9E3779B97F4A7C15)
# The hash of a NaN: that of the text ``nan`` (column_hashes).
NAN_HASH = pd.util.hash_array(np.array(["nan"], dtype=object), categorize=False)[0]
ROW_PRIME = np.uint64(1099511628211)
# Values sampled to tell a column of (mostly) distinct texts from one of few groups.
SAMPLE = 1000


def _text_hashes(series: pd.Series, kind: str) -> np.ndarray:
    """Hashes of the values' ``str``, each distinct value formatted and hashed once where the
    column holds one type (factorize would merge 1, 1.0 and True in a mixed object column)."""
    typed = not pd.api.types.is_object_dtype(series.dtype)
    if kind == "string" and series.iloc[:SAMPLE].nunique() > SAMPLE // 2:  # ids: mostly distinct
        return pd.util.hash_array(series.to_numpy(dtype=object, na_value=""), categorize=False)
    if typed or kind in {"string", "integer", "boolean"}:
        codes, uniques = pd.factorize(series)
        texts = np.array([str(v) for v in np.asarray(uniques, dtype=object)] + [""], dtype=object)
        return pd.util.hash_array(texts, categorize=False)[codes]
    texts = np.array([str(v) for v in series.to_numpy(dtype=object)], dtype=object)
    return pd.util.hash_array(texts, categorize=False)


def column_hashes(series: pd.Series) -> np.ndarray:
    """A uint64 hash of each value by its meaning, equal for a driver's Python values (object
    columns) and the same values read as typed columns (db.sources.stream): floats by their double,
    timestamps by their UTC microsecond, every other value by its ``str``; missing values alike,
    and a NaN (float or Decimal: no missing value) as the text ``nan`` (which ADBC gives for a
    PostgreSQL numeric NaN)."""
    missing = series.isna().to_numpy(dtype=bool)
    nan = np.zeros(len(series), dtype=bool)
    if pd.api.types.is_object_dtype(series.dtype) and missing.any():
        values = series.to_numpy(dtype=object)
        for i in np.flatnonzero(missing):
            nan[i] = isinstance(values[i], (float, np.floating, Decimal))
        missing = missing & ~nan
    kind = pd.api.types.infer_dtype(series, skipna=True)
    if kind == "floating":
        hashes = pd.util.hash_array(series.to_numpy(dtype="float64", na_value=0.0))
    elif kind in {"datetime", "datetime64"}:
        moments = pd.to_datetime(series, utc=True).astype("datetime64[us, UTC]")
        hashes = pd.util.hash_array(moments.to_numpy(dtype="int64", na_value=0))
    else:
        hashes = _text_hashes(series, kind)
    return np.where(missing, MISSING_HASH, np.where(nan, NAN_HASH, hashes))


def row_hash_sum(frame: pd.DataFrame) -> int:
    """Sum (mod 2^64) of the rows' hashes: order-independent and additive over chunks.

    A row's column_hashes are combined in column order, then mixed by pandas' hash_array (the
    splitmix64 finaliser). Unmixed, the combination is linear, so the sum would be one of
    per-column sums, blind to values moved between rows (predictions swapped between groups)."""
    rows = np.zeros(len(frame), dtype=np.uint64)
    for name in frame.columns:
        rows = rows * ROW_PRIME + column_hashes(frame[name])
    return int(pd.util.hash_array(rows).sum(dtype=np.uint64))


def fingerprint(frame: pd.DataFrame | None, hash_sum: int = 0, rows: int = 0) -> str:
    """SHA-256 of the row count and the sum of row hashes: equal inputs (in any order, in any
    chunks) give equal fingerprints, and any changed row (a value changed, or moved to another
    row) another one. Pass a frame, or a streamed (hash_sum, rows) pair."""
    if frame is not None:
        hash_sum, rows = row_hash_sum(frame), len(frame)
    return hashlib.sha256(f"{rows}:{hash_sum}".encode()).hexdigest()
