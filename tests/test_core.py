"""The core's stages, called in a straight line, timed under the names a run stores; its result
frames are those the result tables' contracts name."""

from __future__ import annotations

from dataclasses import fields

import pandas as pd

from biasaudit.schemas.config import audit_from_options
from biasaudit.schemas.results import CONTRACTS
from biasaudit.tasks.core import AuditResult, audit_counts
from biasaudit.tasks.counts import group_counts

# The keys of a run's stored ``timings`` the core writes (earlier runs hold the same).
STAGES = {
    "pairs",
    "metrics",
    "two-group metrics",
    "compare",
    "match",
    "comparison rates",
    "planning",
    "detection",
    "smoothing",
    "meta-metrics",
}


def _counts():
    frame = pd.DataFrame(
        {
            "sex": ["F" if i % 3 else "M" for i in range(300)],
            "y_true": [(i // 2) % 2 for i in range(300)],
            "y_pred": [(i // 5) % 2 for i in range(300)],
        }
    )
    audit = audit_from_options(attributes=["sex"], intersections=[], reference_groups=None)
    return group_counts(frame, audit.attributes, audit.intersections), audit


def test_each_stage_is_timed_under_its_stored_name_and_timing_changes_nothing():
    counts, audit = _counts()
    timings: dict[str, float] = {}
    timed = audit_counts(counts, audit, timings=timings)
    assert set(timings) == STAGES
    assert all(isinstance(v, float) and v >= 0 for v in timings.values())
    untimed = audit_counts(counts, audit)
    for name, frame in timed.frames().items():
        pd.testing.assert_frame_equal(frame, untimed.frames()[name])


def test_the_result_frames_are_the_contracts_and_each_is_a_field():
    counts, audit = _counts()
    frames = audit_counts(counts, audit).frames()
    assert list(frames) == list(CONTRACTS)
    assert set(CONTRACTS) <= {f.name for f in fields(AuditResult)}
