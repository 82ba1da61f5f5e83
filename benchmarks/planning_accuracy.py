"""Planning's normal limit against the exact power: the proof grid of NORMAL_SKEW, and the audits.

The grid: smaller group n_s of 10 ... 10^7, the larger 1 ... 10^4 times it (at most 10^8), levels
0.05 ... 10^-6, tolerances 0, 0.05 and 0.2, reference rates 0.01 ... 0.9, the group's rate on
either side, at the gaps where the normal limit gives power 0.2, 0.5 and 0.8 (where its error is
largest: a power near 0 or 1 moves little). Each cell's exact power (exact_powers at planning's
precision) against normal_power at the same level and tolerance, by the skewness term κ
(skewness_term): the largest error among the cells at or below each κ. Then the audits: for every
comparison of COMPAS (race, sex, race x sex), the 642-count-row audit of benchmarks/audit_cost.py
and the demo's four audits, how many planning powers 'auto' takes from the normal limit and their
largest distance from the exact power.

    python benchmarks/planning_accuracy.py [--out benchmarks/planning_accuracy.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

BOUNDS = (0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.02, 0.05)


def grid() -> np.ndarray:
    """Rows (n_s, n_l, p_group, p_reference, tolerance, level) of the proof grid."""
    from biasaudit.tasks import distributions

    rows = []
    for n_s, ratio, level, u, p_r, side, target in itertools.product(
        [10, 100, 1e3, 1e4, 1e5, 1e6, 1e7],
        [1, 10, 100, 1e3, 1e4],
        [0.05, 1e-3, 1e-4, 1e-6],
        [0.0, 0.05, 0.2],
        [0.01, 0.2, 0.5, 0.9],
        [1, -1],
        [0.2, 0.5, 0.8],
    ):
        n_l = n_s * ratio
        if n_l > 1e8:
            continue
        z = distributions.norm_isf(level / 2) + distributions.norm_ppf(target)
        p_g = p_r + side * u
        for _ in range(4):  # the gap where the normal limit has this power
            s = np.sqrt(max(p_g * (1 - p_g), 0.0) / (n_s + 2) + p_r * (1 - p_r) / (n_l + 2))
            p_g = float(np.clip(p_r + side * (u + z * s), 1e-9, 1 - 1e-9))
        if abs(p_g - p_r) > u:
            rows.append((n_s, n_l, p_g, p_r, u, level))
    return np.array(rows)


def proof(cells: np.ndarray, kappa_max: float = 0.05) -> dict:
    """The exact and normal powers of the grid's cells with κ <= kappa_max, and the largest
    error at or below each bound."""
    from biasaudit.tasks.planning import OUTSIDE, PRECISION
    from biasaudit.tasks.twosample import GAMMA
    from biasaudit.tasks.twosample_power import exact_powers, normal_power, skewness_term

    n_s, n_l, p_g, p_r, u, level = cells.T
    kappa = skewness_term(n_s, n_l, p_g, p_r, u, level)
    cells, kappa = cells[kappa <= kappa_max], kappa[kappa <= kappa_max]
    exact, normal = np.empty(len(cells)), np.empty(len(cells))
    start = time.perf_counter()
    for key in np.unique(cells[:, [0, 4, 5]], axis=0):  # one size, tolerance and level at a time
        at = np.flatnonzero((cells[:, [0, 4, 5]] == key).all(axis=1))
        n_s, n_l, p_g, p_r, u, level = cells[at].T
        exact[at] = exact_powers(
            n_s, n_l, p_g, p_r, u[0], level[0], null_sides=False, precision=PRECISION,
            outside=OUTSIDE,
        )
        normal[at] = normal_power(
            p_g, n_s, p_r, n_l, u[0], level[0], null_sides=False, gamma=GAMMA
        )
    error = np.abs(exact - normal)
    rows = []
    for bound in BOUNDS:
        inside = kappa <= bound
        if inside.any():
            worst = np.flatnonzero(inside)[np.argmax(error[inside])]
            rows.append(
                {
                    "kappa": bound,
                    "cells": int(inside.sum()),
                    "max_error": float(error[worst]),
                    "worst": dict(
                        zip(["n_s", "n_l", "p_group", "p_reference", "tolerance", "level"],
                            map(float, cells[worst]))
                    ),
                }
            )
    return {"seconds": time.perf_counter() - start, "bounds": rows}


def audits() -> dict:
    """Per audit: comparisons, how many 'auto' takes from the normal limit, their largest error
    against the exact power, and planning's time with each method."""
    sys.path.insert(0, str(Path(__file__).parent))
    import audit_cost

    from biasaudit.flows.config_files import load_config
    from biasaudit.flows.demo import synthetic_predictions
    from biasaudit.tasks import api, planning

    calls: list[tuple] = []
    detection_power = planning.detection_power

    def remembered(*args, **kwargs):
        calls.append(args)
        return detection_power(*args, **kwargs)

    cases = [
        ("COMPAS", audit_cost.compas(), audit_cost.BY_RACE_SEX),
        ("642 count rows", audit_cost.predictions(), audit_cost.WIDE),
    ]
    demo = synthetic_predictions()
    toml = Path(__file__).resolve().parents[1] / "flows" / "demo_audits.toml"
    for audit in load_config(toml).audits:
        frame = demo[demo["model_id"] == audit.model_id].drop(columns=["score"])
        options = {"attributes": list(audit.attributes), "intersections": audit.intersections}
        cases.append((f"demo {audit.name}", frame, options))
    out = {}
    planning.detection_power = remembered
    try:
        for name, frame, options in cases:
            calls.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                api.audit_frame(frame, **options)
            args = calls[0][:6]
            timed = {}
            for method in ("auto", "exact"):
                start = time.perf_counter()
                powers, methods = detection_power(*args, method)
                timed[method] = (time.perf_counter() - start, powers, methods)
            (_, auto, methods), (_, exact, _) = timed["auto"], timed["exact"]
            normal = methods == "limit"
            out[name] = {
                "powers": int(auto.size),
                "normal": int(normal.sum()),
                "max_error": float(np.abs(auto - exact)[normal].max()) if normal.any() else 0.0,
                "seconds_auto": timed["auto"][0],
                "seconds_exact": timed["exact"][0],
            }
    finally:
        planning.detection_power = detection_power
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/planning_accuracy.json"))
    args = parser.parse_args()
    from biasaudit.tasks.twosample_power import NORMAL_SKEW

    cells = grid()
    result = {"normal_skew": NORMAL_SKEW, "grid_cells": len(cells), "grid": proof(cells)}
    print(f"NORMAL_SKEW {NORMAL_SKEW}; {len(cells)} grid cells, "
          f"exact powers in {result['grid']['seconds']:.0f} s")
    print("| κ at most | cells | largest error | at (n_s, n_l, p_group, p_reference, tolerance, level) |")
    print("|---:|---:|---:|---|")
    for row in result["grid"]["bounds"]:
        worst = ", ".join(f"{v:.4g}" for v in row["worst"].values())
        print(f"| {row['kappa']} | {row['cells']:,} | {row['max_error']:.4f} | {worst} |")
    result["audits"] = audits()
    print("\n| audit | powers | normal limit | largest error | planning auto (s) | exact (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in result["audits"].items():
        print(f"| {name} | {row['powers']:,} | {row['normal']:,} | {row['max_error']:.2g} | "
              f"{row['seconds_auto']:.2f} | {row['seconds_exact']:.2f} |")
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
