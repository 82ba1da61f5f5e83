"""Planning's floor: what the exact power of detection's test costs on the 642-row audit, however
well its critical statistics are guessed, beside a goal of 2.5x the 18-row audit.

In one process, on audit_cost.py's 400,000 predictions: the 18-row and the 642-row audits
(``audit_frame``, every stage, timed per stage as audit_cost.py does), then the critical-statistic
searches planning made on the 642-row audit, run again twice: as planning runs them, and each
started half a precision below its own answer with a bracket one precision wide (the fewest
evaluations a search can close in: it must see P(S >= t) on both sides of c). Cold rows whose c
is infinite start as planning's cold rows do. The second is a floor for any faster guess of c
within this computation: a row's probability tables and the smaller group's pmf are built
either way. Medians of ``--repeat`` rounds.

    python benchmarks/planning_floor.py [--repeat 3]
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

from biasaudit.tasks import distributions, twosample


def recorded_searches(frame) -> tuple[float, dict[str, float], list[tuple]]:
    """The 642-row audit's time and stage times, and the inputs and answers of every
    _critical_statistics call its planning made."""
    calls: list[tuple] = []
    original = twosample._critical_statistics

    def recording(n_a, n_b, p_b, u_tol, budget, precision=1e-6):
        out = original(n_a, n_b, p_b, u_tol, budget, precision)
        calls.append((n_a, n_b, p_b, u_tol, budget, precision, out))
        return out

    twosample._critical_statistics = recording
    try:
        seconds, stages, _ = audit_cost.timed_audit(frame, **audit_cost.WIDE)
    finally:
        twosample._critical_statistics = original
    return seconds, stages, calls


def searches(calls: list[tuple], *, at_answer: bool) -> tuple[float, int, float]:
    """Seconds, evaluations of P(S >= t) and the largest |c − planning's c| of the recorded
    searches, as planning runs them or started at their answers."""
    evaluations = 0
    counted = twosample._Zoned.__call__

    def counting(self, t, rows):
        nonlocal evaluations
        evaluations += len(rows)
        return counted(self, t, rows)

    twosample._Zoned.__call__ = counting  # type: ignore[method-assign]
    worst, start = 0.0, time.perf_counter()
    try:
        for n_a, n_b, p_b, u_tol, budget, precision, answer in calls:
            if at_answer:
                known = np.isfinite(answer)
                z = float(distributions.norm_isf(budget))
                got = twosample._searched_batches(
                    n_a,
                    n_b,
                    p_b,
                    u_tol,
                    budget,
                    precision,
                    np.where(known, answer - precision / 2, z),
                    np.where(known, precision, twosample._BRACKET),
                )
            else:
                got = twosample._critical_statistics(n_a, n_b, p_b, u_tol, budget, precision)
            both = np.isfinite(got) & np.isfinite(answer)
            worst = max(worst, float(np.max(np.abs(got - answer)[both], initial=0.0)))
    finally:
        twosample._Zoned.__call__ = counted  # type: ignore[method-assign]
    return time.perf_counter() - start, evaluations, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    frame = audit_cost.predictions()
    audit_cost.timed_audit(frame, **audit_cost.NARROW)  # warm: imports, caches
    rounds: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        small, _, _ = audit_cost.timed_audit(frame, **audit_cost.NARROW)
        wide, stages, calls = recorded_searches(frame)
        run, evaluations, _ = searches(calls, at_answer=False)
        floor, floor_evaluations, worst = searches(calls, at_answer=True)
        for key, value in {
            "18-row audit": small,
            "642-row audit": wide,
            "642-row planning": stages["planning"],
            "642-row audit without planning": wide - stages["planning"],
            "searches as planning runs them": run,
            "searches started at their answers": floor,
        }.items():
            rounds.setdefault(key, []).append(value)
    rows = sum(len(call[2]) for call in calls)
    print(
        f"critical statistics: {rows:,}; evaluations {evaluations:,} as run, "
        f"{floor_evaluations:,} started at the answers (c within {worst:.1e} of planning's)"
    )
    print(f"\nmedians of {args.repeat} rounds, load average {os.getloadavg()[0]:.2f}")
    print("| seconds | median | range |\n| --- | ---: | ---: |")
    for key, values in rounds.items():
        print(f"| {key} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} |")
    goal = 2.5 * statistics.median(rounds["18-row audit"])
    rest = statistics.median(rounds["642-row audit without planning"])
    print(
        f"\nthe goal (2.5x the 18-row audit): {goal:.2f} s; the 642-row audit without planning: "
        f"{rest:.2f} s; planning's searches alone, started at their answers: "
        f"{statistics.median(rounds['searches started at their answers']):.2f} s"
    )


if __name__ == "__main__":
    main()
