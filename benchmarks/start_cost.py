"""Costs outside the statistics: a fresh interpreter's first audit, and Prefect's share of a run.

- frame: ProPublica's COMPAS (race, sex, race x sex) in a fresh interpreter that has imported
  pandas and read the file: ``import biasaudit`` and the first ``audit_frame`` (cold), then a
  second ``audit_frame`` on the same frame (warm). Wall and CPU seconds (user + system), the
  minor page faults of each call, planning's CPU seconds in each (tasks.planning.plan) and the
  process's peak RSS. The overhead is the import and the cold call minus the warm call.
- run: a small SQLite table (the demo's four models, 72,000 predictions) and four light audits
  (one per model: sex, TPR and FPR). Each process is timed whole, from its start to its exit:
  ``run_audit`` of one audit as plain calls (the audit process itself), ``biasaudit run`` of the
  same audit against a running Prefect server, then all four audits as plain calls in one
  process and the nightly flow of the four in one process. ``--force`` everywhere, so every run
  does the whole work. The Prefect server is $PREFECT_API_URL's, else a ``prefect server start``
  of this script's own (its start-up is not timed).

Medians of ``--repeat`` processes. ``--before PATH`` also times an older checkout of the package
(first on PYTHONPATH through a link named biasaudit), each of its processes alternated with the
current code's, so that both meet the same load.

    python benchmarks/start_cost.py [--part frame|run|both] [--repeat 5] [--before PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

COMPAS = Path(__file__).resolve().parents[2] / "shared" / "data" / "compas-two-years.csv"
BIN = Path(sys.executable).parent
MODELS = ["credit-scorer", "hiring-screen", "fraud-detector", "claims-triage"]

FRAME = """
import json, resource, sys, time, warnings
import pandas as pd
raw = pd.read_csv(sys.argv[1])
frame = pd.DataFrame({
    "y_true": raw["two_year_recid"].astype(float),
    "y_pred": (raw["score_text"] != "Low").astype("int8"),
    "race": raw["race"],
    "sex": raw["sex"],
})
def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall": time.perf_counter(), "cpu": r.ru_utime + r.ru_stime, "faults": r.ru_minflt}
def since(start):
    end = usage()
    return {k: end[k] - start[k] for k in end}
planning = []
def audit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        biasaudit.audit_frame(frame, attributes=["race", "sex"], intersections=[["race", "sex"]])
start = usage()
import biasaudit
biasaudit.audit_frame  # imported on first use
imports = since(start)
from biasaudit.tasks import core
plan = core.plan
def timed_plan(*args, **kwargs):
    begun = time.process_time()
    try:
        return plan(*args, **kwargs)
    finally:
        planning.append(time.process_time() - begun)
core.plan = timed_plan
begun = usage()
audit()
cold = since(begun)
begun = usage()
audit()
warm = since(begun)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"imports": imports, "cold": cold, "warm": warm, "planning": planning, "peak": peak}))
"""

PLAIN = """
import sys
from biasaudit.flows.pipeline import run_audit
for name in sys.argv[3:]:
    run_audit(name, sys.argv[1], sys.argv[2], None, True)
"""

NIGHTLY = """
import sys
from biasaudit.flows.nightly import nightly_flow
nightly_flow(sys.argv[1], sys.argv[2], None, sys.argv[3:], True)
"""


def tree_env(tree: Path | None, folder: Path) -> dict[str, str]:
    """The environment of a process running ``tree``'s package (None: the installed one)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if tree is not None:
        link = folder / "trees" / tree.name / "biasaudit"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(tree.resolve())
        env["PYTHONPATH"] = str(link.parent)
    return env


def timed(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Wall and CPU seconds of ``command``, a process of its own, from its start to its exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"{' '.join(command[:4])} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall": wall, "cpu": cpu, "stdout": done.stdout}


def median(values: list[float]) -> float:
    return statistics.median(values)


def frame_part(trees: dict[str, Path | None], repeat: int, folder: Path) -> None:
    """Cold against warm audit_frame on COMPAS, ``repeat`` fresh interpreters per tree."""
    runs: dict[str, list[dict]] = {label: [] for label in trees}
    for _ in range(repeat):
        for label, tree in trees.items():
            done = timed(
                [sys.executable, "-c", FRAME, str(COMPAS)], tree_env(tree, folder), folder
            )
            runs[label].append(json.loads(done["stdout"].splitlines()[-1]))
    print(f"\nCOMPAS, audit_frame: medians of {repeat} fresh interpreters (seconds; faults: minor)")
    header = (
        "| code | import wall | import CPU | cold wall | cold CPU | cold faults | warm wall "
        "| warm CPU | warm faults | planning CPU cold / warm | overhead wall | overhead CPU "
        "| peak RSS MB |"
    )
    print(header)
    print("| --- |" + " ---: |" * (header.count("|") - 2))
    for label, results in runs.items():
        m = {
            (part, key): median([r[part][key] for r in results])
            for part in ("imports", "cold", "warm")
            for key in ("wall", "cpu", "faults")
        }
        overhead = {
            k: median([r["imports"][k] + r["cold"][k] - r["warm"][k] for r in results])
            for k in ("wall", "cpu")
        }
        plan_cold = median([r["planning"][0] for r in results])
        plan_warm = median([r["planning"][1] for r in results])
        print(
            f"| {label} | {m['imports', 'wall']:.2f} | {m['imports', 'cpu']:.2f} "
            f"| {m['cold', 'wall']:.2f} | {m['cold', 'cpu']:.2f} | {m['cold', 'faults']:,.0f} "
            f"| {m['warm', 'wall']:.2f} | {m['warm', 'cpu']:.2f} | {m['warm', 'faults']:,.0f} "
            f"| {plan_cold:.2f} / {plan_warm:.2f} | {overhead['wall']:.2f} | {overhead['cpu']:.2f} "
            f"| {median([r['peak'] for r in results]):.0f} |"
        )


@contextlib.contextmanager
def prefect_server(folder: Path) -> Iterator[str]:
    """$PREFECT_API_URL, else a ``prefect server start`` of our own for the block."""
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "PREFECT_HOME": str(folder / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
    }
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{api}/health", timeout=2):
                break
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("the Prefect server did not start")
            time.sleep(0.5)
        yield api
    finally:
        server.terminate()
        server.wait(timeout=30)


def small_database(folder: Path) -> tuple[str, Path]:
    """The demo's predictions in a fresh SQLite file, and a configuration of four light audits."""
    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.demo import GROUPS, synthetic_predictions

    url = f"sqlite:///{folder / 'start.db'}"
    upgrade(url)
    load_predictions(make_engine(url), synthetic_predictions(), list(GROUPS), "start_cost")
    config = folder / "audits.toml"
    config.write_text(
        "".join(
            f'[[audits]]\nname = "{model}"\nmodel_id = "{model}"\nwindow = "all"\n'
            'attributes = ["sex"]\nmetrics = ["tpr", "fpr"]\n\n'
            for model in MODELS
        )
    )
    return url, config


def run_part(trees: dict[str, Path | None], repeat: int, folder: Path) -> None:
    """Plain processes against `biasaudit run` and the nightly flow, on a running server."""
    url, config = small_database(folder)
    one = MODELS[:1]
    plain = [sys.executable, "-c", PLAIN, str(config), url]
    run = [str(BIN / "biasaudit"), "run", *one, "--config", str(config), "--db", url, "--force"]
    nightly = [sys.executable, "-c", NIGHTLY, str(config), url, *MODELS]
    # (process, its command, the plain process it is compared with)
    commands = [
        ("one audit, plain calls", [*plain, *one], None),
        ("one audit, `biasaudit run`", run, "one audit, plain calls"),
        ("four audits, plain calls, one process", [*plain, *MODELS], None),
        ("four audits, nightly flow, one process", nightly, "four audits, plain calls, one process"),
    ]
    times: dict[tuple[str, str], list[dict]] = {}
    with prefect_server(folder) as api:
        for _ in range(repeat):
            for name, command, _base in commands:
                for label, tree in trees.items():
                    env = {**tree_env(tree, folder), "PREFECT_API_URL": api}
                    times.setdefault((label, name), []).append(timed(command, env, folder))
    print(f"\nSmall SQLite table, Prefect server running: medians of {repeat} processes (seconds)")
    print("| code | process | wall | CPU | added by Prefect: wall | CPU |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for label in trees:
        for name, _command, base in commands:
            wall = median([t["wall"] for t in times[(label, name)]])
            cpu = median([t["cpu"] for t in times[(label, name)]])
            added = "| "
            if base is not None:
                base_wall = median([t["wall"] for t in times[(label, base)]])
                base_cpu = median([t["cpu"] for t in times[(label, base)]])
                added = f"{wall - base_wall:+.2f} | {cpu - base_cpu:+.2f}"
            print(f"| {label} | {name} | {wall:.2f} | {cpu:.2f} | {added} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["frame", "run", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", type=Path, help="an older checkout of the package, to time too")
    args = parser.parse_args()
    trees: dict[str, Path | None] = {"after": None}
    if args.before:
        trees = {"before": args.before, "after": None}
    folder = Path(tempfile.mkdtemp(prefix="biasaudit-start-"))
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    if args.part in ("frame", "both"):
        frame_part(trees, args.repeat, folder)
    if args.part in ("run", "both"):
        run_part(trees, args.repeat, folder)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
