"""Audit time and peak memory at scale against the database's own GROUP BY floor.

Generates N predictions in the database (3 sensitive attributes: race 6 groups, sex 2, age 8;
96 intersectional groups; the prediction id is the table's primary key, as in production; a REAL
score and a zoned timestamp that the push-down validates), then measures in one run:

- floor: one bare ``GROUP BY race, sex, age, label, pred`` of the model's rows (best of --repeat),
  and the CPU seconds the whole machine spent on it (the database's parallel workers);
- scan: the push-down scan alone (db.sources.pushdown.pushdown_cells) in this process (best of --repeat),
  and the machine's CPU seconds likewise; beforehand, the machine's CPU per second at rest (5 s);
- process: a fresh Python process running the whole audit as plain calls (imports, scan,
  statistics with the full metric catalogue and B = 1,000, persist, report), wall time and peak RSS;
- cli: ``biasaudit run`` against a running Prefect server (--prefect starts one), wall time and
  peak RSS; optionally other scan modes in a fresh process (--modes);
- fairlearn (--fairlearn, meant for 1M-2M): pandas reads the table, Fairlearn's MetricFrame
  computes tpr, fpr and selection rate by race x sex x age.
- nightly (--nightly K): the nightly flow in a fresh process, once with one audit and once with K
  copies of it (each its own name, the same table), alternated --repeat times against a running
  Prefect server (its own, as --prefect); an audit's marginal cost inside the flow is
  (median with K − median with one)/(K − 1), against the floor; with the CPU seconds of the flow's
  process, of the Prefect server, of its database's PostgreSQL backends (when
  $PREFECT_API_DATABASE_CONNECTION_URL names one) and of the whole machine (the audit database's
  backends and workers too; read from /proc, Linux) per marginal audit. ``--before PATH``
  (an older checkout of the package, first on PYTHONPATH through a link named biasaudit) runs
  the same nightly processes of that code too, each process alternated with this code's.

    python benchmarks/scale.py --rows 10000000 --db postgresql://postgres@127.0.0.1:5432/bench10m --prefect
    python benchmarks/scale.py --rows 100000000 --db postgresql://postgres@127.0.0.1:5432/bench100m --repeat 2
    python benchmarks/scale.py --rows 2000000 --db postgresql://postgres@127.0.0.1:5432/bench2m --fairlearn
    python benchmarks/scale.py --rows 10000000 --db postgresql://postgres@127.0.0.1:5432/bench10m --nightly 3
    python benchmarks/scale.py --rows 10000000 --db postgresql://postgres@127.0.0.1:5432/bench10m --nightly 3 --before /path/to/checkout
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from sqlalchemy import text
from sqlalchemy.engine import make_url

from biasaudit.db.engine import make_engine
from biasaudit.db.store.migrate import upgrade

# an older checkout's processes run with start_cost.py's environment (its tree first on the path)
_SPEC = importlib.util.spec_from_file_location("start_cost", Path(__file__).parent / "start_cost.py")
assert _SPEC is not None and _SPEC.loader is not None
start_cost = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(start_cost)

TABLE = "bench_predictions"

POSTGRES_FILL = f"""
INSERT INTO {TABLE}
SELECT 'p' || g, 'm', timestamptz '2026-01-01' + (g % 2592000) * interval '1 second',
       CASE WHEN random() < 0.05 THEN NULL ELSE (random() < 0.3)::int END,
       (random() < 0.35)::int, random(),
       (ARRAY['A','B','C','D','E','F'])[1 + floor(power(random(), 2) * 6)::int],
       (ARRAY['F','M'])[1 + floor(random() * 2)::int],
       'a' || floor(random() * 8)::int
FROM generate_series(1, :n) AS g
"""
SQLITE_FILL = f"""
WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n)
INSERT INTO {TABLE}
SELECT 'p' || g, 'm', datetime('2026-01-01', '+' || (g % 2592000) || ' seconds'),
       CASE WHEN abs(random()) % 100 < 5 THEN NULL ELSE abs(random()) % 10 < 3 END,
       abs(random()) % 100 < 35, (abs(random()) % 1000000) / 1000000.0,
       substr('AAAAAAAAABBBBBCCCDDEF', 1 + abs(random()) % 21, 1),
       substr('FM', 1 + abs(random()) % 2, 1),
       'a' || (abs(random()) % 8)
FROM s
"""
FLOOR = f"SELECT race, sex, age, label, pred, count(*) FROM {TABLE} WHERE model = 'm' GROUP BY race, sex, age, label, pred"


def prepare(url: str, rows: int, keyed: bool = True) -> None:
    """Create the audit tables and a source table of exactly ``rows`` predictions (the prediction
    id its primary key, added after the fill, unless ``keyed`` is false: then every scan also
    checks ids for repeats). On PostgreSQL the table is UNLOGGED (no WAL for the fill; scans read
    it like any table)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        admin = make_engine(parsed.set(database="postgres").render_as_string(hide_password=False))
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            exists = connection.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": parsed.database}
            )
            if not exists:
                connection.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    upgrade(url)
    engine = make_engine(url)
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as connection:
        current = (
            connection.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar()
            if _exists(connection)
            else None
        )
        if current == rows and _keyed(connection) == keyed:
            return
        connection.execute(text(f"DROP TABLE IF EXISTS {TABLE}"))
        timestamp = "timestamptz" if postgres else "timestamp"
        connection.execute(
            text(
                f"CREATE {'UNLOGGED ' if postgres else ''}TABLE {TABLE} (pid text, model text, "
                f"at {timestamp}, label smallint, pred smallint, score real, race text, sex text, "
                "age text)"
            )
        )
        start = time.perf_counter()
        connection.execute(text(POSTGRES_FILL if postgres else SQLITE_FILL), {"n": rows})
        if keyed:
            if postgres:
                connection.execute(text(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (pid)"))
            else:
                connection.execute(text(f"CREATE UNIQUE INDEX {TABLE}_pid ON {TABLE} (pid)"))
        print(f"generated {rows:,} rows in {time.perf_counter() - start:.0f} s", flush=True)
    if postgres:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text(f"VACUUM ANALYZE {TABLE}"))


def _keyed(connection) -> bool:
    """A production table keys its prediction ids; the scan then needs no duplicate check."""
    from sqlalchemy import inspect

    inspector = inspect(connection)
    if inspector.get_pk_constraint(TABLE).get("constrained_columns") == ["pid"]:
        return True
    return any(i["column_names"] == ["pid"] and i["unique"] for i in inspector.get_indexes(TABLE))


def _exists(connection) -> bool:
    from sqlalchemy import inspect

    return inspect(connection).has_table(TABLE)


AS_OF = datetime(2026, 3, 1, tzinfo=UTC)


def config_file(mode: str, folder: Path, chunk_rows: int = 500_000, copies: int = 0) -> Path:
    """The audit ``bench-{mode}``, or (``copies``) that many named ``bench-{mode}-1`` ..."""
    path = folder / f"bench-{mode}{copies or ''}.toml"
    names = [f"bench-{mode}-{i}" for i in range(1, copies + 1)] if copies else [f"bench-{mode}"]
    path.write_text(
        "".join(
            f'[[audits]]\nname = "{name}"\nmodel = "m"\nsource = "{TABLE}"\n'
            'attributes = ["race", "sex", "age"]\nintersections = [["race", "sex", "age"]]\n'
            'columns = { prediction_id = "pid", model_id = "model", predicted_at = "at", '
            'y_true = "label", y_pred = "pred" }\n'
            f'[audits.scan]\nmode = "{mode}"\nchunk_rows = {chunk_rows}\n'
            "[audits.thresholds]\nbootstrap_replicates = 1000\n"
            for name in names
        )
    )
    return path


# A fresh process: the whole audit as plain calls (no Prefect), its wall time and peak RSS.
PROCESS = """
import json, resource, sys, time
from datetime import datetime, UTC
start = time.perf_counter()
from biasaudit.flows.pipeline import run_audit
url, config, audit = sys.argv[1:4]
run_audit(audit, config, url, datetime(2026, 3, 1, tzinfo=UTC), True)
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start,
      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
# A command's wall time and the peak RSS of its process (it runs as this wrapper's only child).
MEASURED = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if done.returncode:
    sys.exit(done.stdout[-2000:] + done.stderr[-2000:])
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start,
      "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


# A fresh process: the nightly flow over the named audits, its wall time from start to exit.
NIGHTLY = """
import json, sys, time
from datetime import datetime, UTC
start = time.perf_counter()
from biasaudit.flows.nightly import nightly_flow
url, config = sys.argv[1:3]
nightly_flow(config, url, datetime(2026, 3, 1, tzinfo=UTC), sys.argv[3:], True)
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start}))
"""


def _result(args: list[str], env: dict | None = None) -> dict:
    """The RESULT line of a process, with its CPU seconds (user + system) as ``cpu``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-3000:])
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {**json.loads(lines[-1][7:]), "cpu": cpu}


def _stat_fields(stat: Path) -> list[str] | None:
    """A /proc/<pid>/stat line's fields after the command name (state first), None if gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def group_cpu(group: int) -> float:
    """CPU seconds so far of the live processes of a process group (Linux /proc; NaN elsewhere)."""
    if not Path("/proc").is_dir():
        return float("nan")
    stats = (_stat_fields(stat) for stat in Path("/proc").glob("[0-9]*/stat"))
    return sum(_cpu(f) for f in stats if f is not None and int(f[2]) == group)  # f[2]: pgrp


def database_cpu(url: str | None) -> float:
    """CPU seconds so far of the other PostgreSQL backends connected to the database at ``url``
    on this machine (the Prefect server's pool: long-lived, so their CPU is still in /proc when
    read), 0 without one."""
    if url is None or not Path("/proc").is_dir():
        return 0.0
    engine = make_engine(url)
    with engine.connect() as connection:
        pids = connection.execute(
            text(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalars()
        stats = [_stat_fields(Path(f"/proc/{pid}/stat")) for pid in pids]
    engine.dispose()
    return sum(_cpu(f) for f in stats if f is not None)


def prefect_database() -> str | None:
    """The URL of the Prefect server's PostgreSQL database ($PREFECT_API_DATABASE_CONNECTION_URL,
    with SQLAlchemy's default driver), if it has one."""
    url = os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL")
    if not url or not url.startswith("postgresql"):
        return None
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def machine_cpu() -> float:
    """Busy CPU seconds so far of the whole machine, every core (Linux /proc/stat; NaN elsewhere):
    the flow's process, the Prefect server and the database's backends and parallel workers
    (time the hypervisor gave to other machines, "steal", left out)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def process_run(url: str, config: Path, audit: str) -> dict:
    return _result([sys.executable, "-c", PROCESS, url, str(config), audit])


def cli_run(url: str, config: Path, audit: str, api_url: str) -> dict:
    """``biasaudit run`` in a fresh process against the running Prefect server at ``api_url``."""
    command = [str(Path(sys.executable).with_name("biasaudit")), "run", audit, "--config",
               str(config), "--db", url, "--as-of", AS_OF.strftime("%Y-%m-%d"), "--force"]
    env = {**os.environ, "PREFECT_API_URL": api_url}
    return _result([sys.executable, "-c", MEASURED, *command], env)


def nightly_marginal(
    url: str,
    folder: Path,
    copies: int,
    repeat: int,
    server: subprocess.Popen,
    api_url: str,
    trees: dict[str, Path | None],
) -> list[dict]:
    """The nightly flow with one audit and with ``copies`` of it, alternated, for each tree of
    code (module doc); each process's wall and CPU seconds, and the server's CPU seconds."""
    config = config_file("pushdown", folder, copies=copies)
    names = [f"bench-pushdown-{i}" for i in range(1, copies + 1)]
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(repeat):
        for label, tree in trees.items():
            env = {**start_cost.tree_env(tree, folder), "PREFECT_API_URL": api_url}
            for audits in (names[:1], names):
                served, stored = group_cpu(server.pid), database_cpu(prefect_database())
                busy = machine_cpu()
                result = _result([sys.executable, "-c", NIGHTLY, url, str(config), *audits], env)
                result["machine_cpu"] = machine_cpu() - busy
                result["server_cpu"] = group_cpu(server.pid) - served
                result["server_database_cpu"] = database_cpu(prefect_database()) - stored
                runs.setdefault((label, len(audits)), []).append(result)
    rows = []
    for label in trees:
        tag = f" ({label})" if len(trees) > 1 else ""
        one, many = runs[(label, 1)], runs[(label, copies)]
        medians = {
            key: (statistics.median(r[key] for r in one), statistics.median(r[key] for r in many))
            for key in ("seconds", "cpu", "server_cpu", "server_database_cpu", "machine_cpu")
        }
        t_one, t_many = medians["seconds"]
        rows += [
            {"what": f"nightly flow, one audit{tag}", "seconds": t_one, "peak RSS MB": None},
            {"what": f"nightly flow, {copies} audits{tag}", "seconds": t_many, "peak RSS MB": None},
            {"what": f"an audit's marginal cost in the nightly flow{tag}",
             "seconds": (t_many - t_one) / (copies - 1), "peak RSS MB": None,
             **{f"marginal {key} s": (b - a) / (copies - 1)
                for key, (a, b) in medians.items() if key != "seconds"}},
        ]
    return rows


def floor_seconds(url: str) -> float:
    engine = make_engine(url)
    with engine.connect() as connection:
        start = time.perf_counter()
        connection.execute(text(FLOOR)).all()
        return time.perf_counter() - start


def scan_seconds(url: str, config: Path, audit_name: str) -> float:
    """The push-down scan alone, in this process."""
    from biasaudit.db.sources.scan import pushdown_cells
    from biasaudit.db.sources.window import window_bounds
    from biasaudit.flows.config_files import load_audit

    audit = load_audit(config, audit_name)
    start_at, end = window_bounds(audit, AS_OF)
    engine = make_engine(url)
    start = time.perf_counter()
    pushdown_cells(engine, audit, start_at, end, datetime.now(UTC))
    return time.perf_counter() - start


def prefect_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """A local ``prefect server start`` in its own home and process group, and its API URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PREFECT_HOME": str(folder / "prefect"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect = str(Path(sys.executable).with_name("prefect"))
    server = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api"
    for _ in range(240):
        try:
            urllib.request.urlopen(f"{api}/health", timeout=2)
        except OSError:
            time.sleep(0.5)
        else:
            return server, api
    os.killpg(server.pid, signal.SIGKILL)
    raise RuntimeError("the Prefect server did not come up in 120 s")


def fairlearn_seconds(url: str) -> float:
    """pandas reads the audit's columns, Fairlearn computes tpr, fpr and selection rate per
    race x sex x age group (labelled rows: Fairlearn takes no missing labels)."""
    from fairlearn.metrics import (
        MetricFrame,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )

    start = time.perf_counter()
    frame = pd.read_sql(
        text(f"SELECT race, sex, age, label, pred FROM {TABLE} WHERE model = 'm'"),
        make_engine(url),
    )
    frame = frame[frame["label"].notna()]
    _ = MetricFrame(
        metrics={"tpr": true_positive_rate, "fpr": false_positive_rate, "ppr": selection_rate},
        y_true=frame["label"].astype("int8"),
        y_pred=frame["pred"].astype("int8"),
        sensitive_features=frame[["race", "sex", "age"]],
    ).by_group
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db", default="sqlite:///bench.db")
    parser.add_argument("--repeat", type=int, default=3, help="floor and scan: best of this many")
    parser.add_argument("--modes", default="", help="also these scan modes in a fresh process")
    parser.add_argument("--prefect", action="store_true", help="also `biasaudit run` (a server)")
    parser.add_argument("--fairlearn", action="store_true", help="also pandas + Fairlearn")
    parser.add_argument("--no-key", action="store_true", help="no primary key on the prediction id")
    parser.add_argument("--chunk-rows", type=int, default=500_000, help="rows per streamed chunk")
    parser.add_argument("--nightly", type=int, default=0, help="also the nightly flow, K audits")
    parser.add_argument(
        "--before", type=Path, help="the nightly flow of an older checkout of the package too"
    )
    args = parser.parse_args()
    prepare(args.db, args.rows, keyed=not args.no_key)
    load = [os.getloadavg()[0]]
    folder = Path(tempfile.mkdtemp())
    config = config_file("pushdown", folder)
    busy = machine_cpu()
    time.sleep(5)
    idle = (machine_cpu() - busy) / 5  # the machine's CPU per second with no benchmark running
    floors, scans, floor_cpu, scan_cpu = [], [], [], []
    for _ in range(args.repeat):  # alternate, so that both see the same load
        busy = machine_cpu()
        floors.append(floor_seconds(args.db))
        floor_cpu.append(machine_cpu() - busy)
        busy = machine_cpu()
        scans.append(scan_seconds(args.db, config, "bench-pushdown"))
        scan_cpu.append(machine_cpu() - busy)
    floor = min(floors)
    rows = [{"what": "floor: GROUP BY", "seconds": floor, "peak RSS MB": None}]
    rows.append({"what": "push-down scan", "seconds": min(scans), "peak RSS MB": None})
    measured = process_run(args.db, config, "bench-pushdown")
    rows.append({"what": "audit process (push-down)", **_renamed(measured)})
    for mode in filter(None, args.modes.split(",")):
        other = config_file(mode, folder, args.chunk_rows)
        rows.append({"what": f"audit process ({mode})",
                     **_renamed(process_run(args.db, other, f"bench-{mode}"))})
    if args.prefect or args.nightly > 1:
        server, api = prefect_server(folder)
        try:
            if args.prefect:
                rows.append({"what": "biasaudit run, Prefect server",
                             **_renamed(cli_run(args.db, config, "bench-pushdown", api))})
            if args.nightly > 1:
                trees = {"before": args.before, "after": None} if args.before else {"after": None}
                rows.extend(
                    nightly_marginal(args.db, folder, args.nightly, args.repeat, server, api, trees)
                )
        finally:
            os.killpg(server.pid, signal.SIGKILL)
    if args.fairlearn:
        rows.append({"what": "pandas read + Fairlearn", "seconds": fairlearn_seconds(args.db),
                     "peak RSS MB": None})
    table = pd.DataFrame(rows).assign(**{"x floor": lambda t: t["seconds"] / floor})
    backend = make_url(args.db).get_backend_name()
    key = "no key on the prediction id" if args.no_key else "prediction id as primary key"
    load.append(os.getloadavg()[0])
    print(f"\n{args.rows:,} rows on {backend} ({key}); floors {floors} (the machine's CPU seconds "
          f"{floor_cpu}), scans {scans} ({scan_cpu}); the machine's CPU at rest {idle:.3f} s per "
          f"second; load "
          f"average {load[0]:.1f} at the start, {load[1]:.1f} at the end:\n")
    print(table.to_markdown(index=False, floatfmt=".2f"))


def _renamed(result: dict) -> dict:
    return {"seconds": result["seconds"], "peak RSS MB": result["peak_rss_mb"]}


if __name__ == "__main__":
    main()
