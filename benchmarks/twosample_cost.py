"""Time of planning and detection (the two stages that run detection's two-sample test) on the
counts of benchmarks/fixed_costs.py (489 groups, skewed shares: groups of a handful to tens of
thousands against references up to 2M), for the metrics given (default tpr: ~500 comparison
rows), with whatever code is imported (an older checkout first on PYTHONPATH for "before").

    python benchmarks/twosample_cost.py [--metrics tpr] [--tolerance 0.0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixed_costs import INTERSECTIONS, LEVELS, predictions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", default="tpr", help="comma-separated rate metrics")
    parser.add_argument("--tolerance", type=float, default=0.0)
    args = parser.parse_args()
    import biasaudit
    from biasaudit.schemas.config import audit_from_options
    from biasaudit.tasks.counts import comparison_pairs, group_counts
    from biasaudit.tasks.detection import detect
    from biasaudit.tasks.planning import plan
    from biasaudit.tasks.rates import comparison_rates

    print(f"code: {Path(biasaudit.__file__).parent}")
    audit = audit_from_options(
        attributes=list(LEVELS),
        intersections=INTERSECTIONS,
        reference_groups={"race": "A", "sex": "M", "age": "a0", "region": "r0"},
        name="twosample-cost",
        model_id="bench",
    )
    counts = group_counts(predictions(), audit.attributes, audit.intersections)
    rates = comparison_rates(
        *comparison_pairs(counts, audit.reference_groups), args.metrics.split(",")
    )
    tested = int(rates["reason"].isna().sum())
    print(f"{len(rates)} comparison rows, {tested} tested")
    thresholds = audit.thresholds
    start = time.perf_counter()
    planning = plan(
        rates, tau=thresholds.planning_disparity, alpha=0.05, power=0.8, tolerance=args.tolerance
    )
    middle = time.perf_counter()
    detection = detect(rates, tolerance=args.tolerance, alpha=0.05)
    end = time.perf_counter()
    print(f"planning  {middle - start:8.2f} s")
    print(f"detection {end - middle:8.2f} s")
    print(
        f"flagged {int(detection['flagged'].sum())}, enough data "
        f"{int((planning['verdict'] == 'enough data').sum())}"
    )


if __name__ == "__main__":
    main()
