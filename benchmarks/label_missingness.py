"""How often the label-completeness warning fires, before and after it tested labels x decision.

Audits of n predictions with attributes g (4 groups: 50/30/15/5%), s (2) and g x s; selection
rate 0.3 in every group, outcomes depending on the decision. Labels are observed:
- MCAR: for 75% of predictions, at random;
- MAR by group: for 90/60/75/50% of g's groups, whatever the decision and outcome (no group's
  metrics are biased: the warning should fire in at most α of audits);
- by decision: as MCAR, except in g's third group (15% of rows), where 90% of selections and 60%
  of rejections are labelled (its TPR, FPR, ... are biased: the warning should fire).
Each audit's warning is tasks.counts.label_completeness(counts, α = 0.05)["uneven"].any();
"before" is tasks/counts.py as it was before the per-group test (taken from git: the parent of
the commit that added _decision_test), which compared completeness across groups by chi-square.

    python benchmarks/label_missingness.py [--audits 500] [--sizes 500,2000,5000]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from biasaudit.tasks import counts as after

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {
    "MCAR": ([0.75] * 4, None),
    "MAR by group": ([0.9, 0.6, 0.75, 0.5], None),
    "by decision in one group": ([0.75] * 4, 2),
}


def before_module():
    """tasks/counts.py from the commit before _decision_test existed, as a module."""
    added = subprocess.run(
        ["git", "log", "-S", "_decision_test", "--format=%H", "--", "tasks/counts.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    source = subprocess.run(
        ["git", "show", f"{added}~1:tasks/counts.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "counts_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("counts_before", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def audit(rng, n: int, share, affected) -> pd.DataFrame:
    g = rng.choice(4, n, p=[0.5, 0.3, 0.15, 0.05])
    y_pred = (rng.random(n) < 0.3).astype("int8")
    y_true = (rng.random(n) < 0.4 + 0.2 * y_pred).astype(float)
    observed = np.asarray(share)[g]
    if affected is not None:
        observed = np.where(g == affected, np.where(y_pred == 1, 0.9, 0.6), observed)
    y_true[rng.random(n) >= observed] = np.nan
    s = rng.choice(["F", "M"], n)
    return pd.DataFrame({"g": g.astype(str), "s": s, "y_true": y_true, "y_pred": y_pred})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=500)
    parser.add_argument("--sizes", default="500,2000,5000")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    before = before_module()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    rows = []
    for name, (share, affected) in SCENARIOS.items():
        for n in map(int, args.sizes.split(",")):
            warned = {"before": 0, "after": 0}
            for _ in range(args.audits):
                counts = after.group_counts(
                    audit(rng, n, share, affected), ["g", "s"], [["g", "s"]]
                )
                warned["before"] += bool(before.label_completeness(counts, 0.05)["uneven"].any())
                warned["after"] += bool(after.label_completeness(counts, 0.05)["uneven"].any())
            rows.append(
                {
                    "labels missing": name,
                    "n": n,
                    "affected group's rows": round(0.15 * n) if affected is not None else None,
                    **{f"warned {k}": v / args.audits for k, v in warned.items()},
                }
            )
            print(rows[-1], flush=True)  # progress: the table follows
    print(f"\n{args.audits} audits per row, α = 0.05 ({time.perf_counter() - start:.0f} s)\n")
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"))


if __name__ == "__main__":
    main()
