"""Time of the score comparisons (tasks.scores.score_comparisons: AUC, recalibration and the
calibration test of every group against the rest and a named reference) on a continuous
probability score, for this checkout and an older one in one run, alternated, with the largest
difference between their results.

Each case is G groups of N rows in all (shares drawn uniformly), the score Beta(2, 3), outcomes
Bernoulli(score), every score distinct (N values). The older checkout (``--before PATH``, put
first on PYTHONPATH through a link named biasaudit) runs in a process of its own on the same
counts; each side's time is the best of ``--repeat``.

    python benchmarks/score_cost.py --before /path/to/older/checkout [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

CASES = [(10, 6_000), (100, 6_000), (100, 60_000), (1_000, 60_000)]

# Run in a process with the checkout to time first on the path: counts in, (seconds, result) out.
TIMED = """
import pickle, sys, time
from biasaudit.tasks.scores import score_comparisons
counts, bins, repeat = pickle.load(open(sys.argv[1], "rb"))
best = float("inf")
for _ in range(repeat):
    start = time.perf_counter()
    result = score_comparisons(counts, bins, {"g": "g0"})
    best = min(best, time.perf_counter() - start)
pickle.dump((best, result), open(sys.argv[2], "wb"))
"""


def case_counts(groups: int, rows: int, seed: int = 1):
    """The counts per (group, score value) of one case and the window's bins."""
    from biasaudit.tasks.scores import bins_of_scores, score_counts

    rng = np.random.default_rng(seed)
    score = rng.beta(2, 3, rows)
    frame = pd.DataFrame(
        {
            "y_true": (rng.random(rows) < score).astype(float),
            "score": score,
            "g": np.array([f"g{i}" for i in range(groups)])[rng.integers(0, groups, rows)],
        }
    )
    bins = bins_of_scores(frame["score"])
    return score_counts(frame, [["g"]], np.unique(score), float(np.median(score))), bins


def timed(checkout: Path, counts, bins, repeat: int, work: Path):
    """(best seconds, result) of the comparisons in a process running ``checkout``'s code."""
    link = work / "path"
    link.mkdir(exist_ok=True)
    if not (link / "biasaudit").exists():
        (link / "biasaudit").symlink_to(checkout.resolve())
    given, taken = work / "in.pickle", work / "out.pickle"
    given.write_bytes(pickle.dumps((counts, bins, repeat)))
    environment = {**os.environ, "PYTHONPATH": str(link)}
    subprocess.run([sys.executable, "-c", TIMED, given, taken], check=True, env=environment)
    return pickle.loads(taken.read_bytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="an older checkout")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    print("| groups | rows | before (s) | after (s) | ratio | largest difference |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for groups, rows in CASES:
            counts, bins = case_counts(groups, rows)
            runs = {}
            for side, checkout in (("before", args.before), ("after", here)):
                work = Path(folder) / side
                work.mkdir(exist_ok=True)
                runs[side] = timed(checkout, counts, bins, args.repeat, work)
            (before, old), (after, new) = runs["before"], runs["after"]
            numbers = old.select_dtypes("number").columns
            gaps = (old[numbers] - new[numbers]).abs().max()
            worst = gaps.idxmax()
            print(
                f"| {groups:,} | {rows:,} | {before:.2f} | {after:.2f} | {before / after:.1f} "
                f"| {gaps[worst]:.1e} ({worst}) |"
            )


if __name__ == "__main__":
    main()
