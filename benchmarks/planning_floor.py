"""Planning's floor: its exact power's cost were every critical statistic guessed, beside the goal.

What the exact power of detection's test costs, computed as planning computes it, however well
its critical statistics were guessed, beside the time the audit's goal allows.

In one process, ``--case rows642``: audit_cost.py's 400,000 predictions audited with 18 and with
642 count rows (``audit_frame``, every stage, timed per stage as audit_cost.py does); ``--case
compas``: ProPublica's COMPAS (race, sex, race x sex) and Fairlearn's MetricFrame with six metrics
on race x sex. Planning's critical-statistic searches (tasks.twosample_power._critical_statistics) on
the larger audit are recorded, then run again twice:

- as planning runs them;
- at the floor: each row's P(S >= t) evaluated at two points only, c − precision and c (where c is
  planning's answer), the fewest any search needs to place c within its precision (it must see
  the probability on both sides); in the batches planning's searches use (_searched_batches), in
  one pass instead of planning's two (cold rows, then warm ones). A row's smaller-group pmf and
  the larger group's tails are computed either way: this is the floor of planning's present
  structure, one search per size pair and nuisance value, not of every possible computation.

Medians of ``--repeat`` rounds.

    python benchmarks/planning_floor.py [--case rows642|compas] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import audit_cost  # this folder's benchmark: the same predictions and timing hook

from biasaudit.tasks import twosample_power

FAIRLEARN = "Fairlearn MetricFrame, six metrics"


def recorded_searches(frame, options: dict) -> tuple[float, dict[str, float], list[tuple]]:
    """The audit's time and stage times, and the arguments and answers of every
    _critical_statistics call its planning made."""
    calls: list[tuple] = []
    original = twosample_power._critical_statistics

    def recording(*args):
        out = original(*args)
        calls.append((*args, out))
        return out

    twosample_power._critical_statistics = recording
    try:
        seconds, stages, _ = audit_cost.timed_audit(frame, **options)
    finally:
        twosample_power._critical_statistics = original
    return seconds, stages, calls


def _two_points(n_a, n_b, p_b, u_tol, budget, precision, answer, bracket):
    """_searched_critical's stand-in at the floor: P(S >= t) of every row at c − precision and
    at c (``answer``, passed as the first t); returns c."""
    _, _, _, probability = twosample_power._row_probabilities(n_a, n_b, p_b, u_tol)
    rows = np.arange(len(p_b))
    t = np.where(np.isfinite(answer), answer, 2e6)  # c infinite: one t beyond the search's 1e6
    probability(t - precision, rows)
    probability(t, rows)
    return answer


def searches(calls: list[tuple], *, floor: bool) -> tuple[float, int]:
    """Seconds and evaluations (rows times points) of the recorded searches, as planning runs
    them or at the floor; the answers checked against planning's."""
    evaluations = 0
    zoned = twosample_power._Zoned.__call__
    searched = twosample_power._searched_critical

    def counting(self, t, rows):
        nonlocal evaluations
        evaluations += len(rows)
        return zoned(self, t, rows)

    twosample_power._Zoned.__call__ = counting
    if floor:
        twosample_power._searched_critical = _two_points
    start = time.perf_counter()
    try:
        for n_a, n_b, p_b, u_tol, budget, precision, answer in calls:
            if floor:
                got = twosample_power._searched_batches(
                    n_a, n_b, p_b, u_tol, budget, precision, answer, np.full(len(p_b), precision)
                )
            else:
                got = twosample_power._critical_statistics(n_a, n_b, p_b, u_tol, budget, precision)
            assert np.array_equal(np.isfinite(got), np.isfinite(answer))
            known = np.isfinite(answer)
            assert np.abs(got - answer)[known].max(initial=0.0) <= precision
    finally:
        twosample_power._Zoned.__call__ = zoned
        twosample_power._searched_critical = searched
    return time.perf_counter() - start, evaluations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["rows642", "compas"], default="rows642")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.case == "rows642":
        frame = audit_cost.predictions()
        small, large = ("18-row audit", audit_cost.NARROW), ("642-row audit", audit_cost.WIDE)
    else:
        frame = audit_cost.compas()
        large = ("COMPAS audit", audit_cost.BY_RACE_SEX)
    audit_cost.timed_audit(frame, **large[1])  # warm: imports, caches
    rounds: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        if args.case == "rows642":
            rounds.setdefault(small[0], []).append(audit_cost.timed_audit(frame, **small[1])[0])
        else:
            rounds.setdefault(FAIRLEARN, []).append(audit_cost.fairlearn_seconds(frame))
        seconds, stages, calls = recorded_searches(frame, large[1])
        run, evaluations = searches(calls, floor=False)
        floor, floor_evaluations = searches(calls, floor=True)
        for key, value in {
            large[0]: seconds,
            "its planning": stages["planning"],
            "the audit without planning": seconds - stages["planning"],
            "planning's searches, as planning runs them": run,
            "the same searches at the floor": floor,
        }.items():
            rounds.setdefault(key, []).append(value)
    rows = np.concatenate([call[2] for call in calls])
    sizes = np.concatenate([np.stack([call[0], call[1]], axis=1) for call in calls])
    infinite = sum(int(np.isinf(call[-1]).sum()) for call in calls)
    print(
        f"{large[0]}: {len(rows):,} critical statistics ({infinite} infinite) over "
        f"{len(np.unique(sizes, axis=0)):,} size pairs; {evaluations:,} evaluations of "
        f"P(S >= t) as planning runs them, {floor_evaluations:,} at the floor"
    )
    print(f"\nmedians of {args.repeat} rounds, load average {os.getloadavg()[0]:.2f}")
    print("| seconds | median | range |\n| --- | ---: | ---: |")
    for key, values in rounds.items():
        print(f"| {key} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} |")


if __name__ == "__main__":
    main()
