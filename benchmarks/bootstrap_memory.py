"""Time and peak memory of the meta-metrics stage's bootstrap, before and after drawing in blocks.

One attribute of G groups (20-300 outcomes each, some observed at 0 or 1), one rate metric,
B replicates, through tasks.metametrics.attribute_meta_metrics; peak memory is tracemalloc's
(numpy's arrays are traced). "before" is tasks/metametrics.py as it was before the blocks (found
in git: the parent of the commit that added BOOTSTRAP_BYTES), loaded as a module of its own and
run only where its 24 bytes per replicate x group cell fit in ``--before-max-mb``. Both give the
same frame (checked with assert_frame_equal wherever both run).

    python benchmarks/bootstrap_memory.py [--groups 100,1000,5000] [--replicates 1000,100000]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.testing import assert_frame_equal

from biasaudit.tasks import metametrics

ROOT = Path(__file__).resolve().parents[1]
OLD_CELL_BYTES = 24


def before_module():
    """tasks/metametrics.py from the commit before BOOTSTRAP_BYTES existed, as a module."""
    added = subprocess.run(
        ["git", "log", "-S", "BOOTSTRAP_BYTES", "--format=%H", "--", "tasks/metametrics.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    source = subprocess.run(
        ["git", "show", f"{added}~1:tasks/metametrics.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "metametrics_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("metametrics_before", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def groups_frame(k: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    denominator = rng.integers(20, 300, k).astype(float)
    numerator = rng.binomial(denominator.astype(int), rng.uniform(0, 1, k)).astype(float)
    return pd.DataFrame(
        {
            "attribute": "a",
            "group_name": [f"g{i}" for i in range(k)],
            "subset": "group",
            "metric": "tpr",
            "value": numerator / denominator,
            "numerator": numerator,
            "denominator": denominator,
        }
    )


def measure(module, frame: pd.DataFrame, replicates: int) -> tuple[pd.DataFrame, float, float]:
    """(the stage's frame, seconds, peak traced MiB)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        table = module.attribute_meta_metrics(frame, ["tpr"], n_boot=replicates, confidence=0.95, seed=0)
        return table, time.perf_counter() - start, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="100,1000,5000")
    parser.add_argument("--replicates", default="1000,100000")
    parser.add_argument("--before-max-mb", type=float, default=2048)
    args = parser.parse_args()
    before = before_module()
    rows = []
    for groups in map(int, args.groups.split(",")):
        frame = groups_frame(groups)
        for replicates in map(int, args.replicates.split(",")):
            row: dict[str, object] = {"groups": groups, "replicates": replicates}
            after, row["after s"], row["after peak MiB"] = measure(metametrics, frame, replicates)
            if OLD_CELL_BYTES * groups * replicates <= args.before_max_mb * 2**20:
                old, row["before s"], row["before peak MiB"] = measure(before, frame, replicates)
                assert_frame_equal(old, after, check_exact=True)
                row["identical"] = True
            rows.append(row)
            print(rows[-1], flush=True)
    print(f"\nBOOTSTRAP_BYTES = {metametrics.BOOTSTRAP_BYTES / 2**20:.0f} MiB\n")
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".1f"))


if __name__ == "__main__":
    main()
