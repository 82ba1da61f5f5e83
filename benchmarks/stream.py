"""Stream scan: rows per second and peak memory, this checkout against another (e.g. the commit
before the Arrow reader), in one run so the ratios share the machine's load.

Each scan runs in a fresh process (``scan_window`` of the benchmark audit of
benchmarks/scale.py, stream mode): wall time of the scan alone, peak RSS of the process, and the
row accounting and fingerprint (which must agree between the two code versions).

    git worktree add /tmp/base <commit>; mkdir /tmp/basepath; ln -s /tmp/base /tmp/basepath/biasaudit
    python benchmarks/stream.py --db postgresql://postgres@127.0.0.1:5432/bench10m \\
        --baseline /tmp/basepath --chunk-rows 100000,500000
    python benchmarks/stream.py --db sqlite:////tmp/s.db --prepare 1000000 --baseline /tmp/basepath
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import config_file, prepare

CHILD = """
import json, resource, sys, time
from datetime import UTC, datetime
from biasaudit.db.engine import make_engine
from biasaudit.db.sources.scan import scan_window
from biasaudit.db.sources.window import window_bounds
from biasaudit.flows.config_files import load_audit
url, config, name = sys.argv[1:4]
audit = load_audit(config, name)
as_of = datetime(2026, 3, 1, tzinfo=UTC)
start, end = window_bounds(audit, as_of)
engine = make_engine(url)
begin = time.perf_counter()
scanned = scan_window(engine, audit, start, end, as_of)
seconds = time.perf_counter() - begin
print("RESULT " + json.dumps({
    "seconds": seconds, "rows": scanned.rows_read, "valid": scanned.rows_valid,
    "quarantined": len(scanned.quarantine), "fingerprint": scanned.fingerprint[:12],
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def scan(url: str, config: Path, pythonpath: str | None) -> dict:
    """One stream scan in a fresh process (``pythonpath``: where another ``biasaudit`` lives)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(config), "bench-stream"],
        capture_output=True, text=True, check=False, env=env,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(lines[-1][7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--prepare", type=int, help="first generate this many rows (scale.py)")
    parser.add_argument("--chunk-rows", default="500000", help="comma-separated chunk sizes")
    parser.add_argument("--baseline", help="PYTHONPATH of the code to compare with")
    parser.add_argument("--baseline-chunk-rows", type=int, default=500_000)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.db, args.prepare)
    folder = Path(tempfile.mkdtemp())
    results = []
    runs = [("this", int(c), None) for c in args.chunk_rows.split(",")]
    if args.baseline:
        runs.insert(0, ("baseline", args.baseline_chunk_rows, args.baseline))
    for code, chunk_rows, path in runs:
        result = scan(args.db, config_file("stream", folder, chunk_rows), path)
        result = {"code": code, "chunk_rows": chunk_rows, **result}
        result["rows/s"] = result["rows"] / result["seconds"]
        results.append(result)
        print(result, flush=True)
    table = pd.DataFrame(results)
    if args.baseline:
        table["speed-up"] = table["rows/s"] / table["rows/s"].iloc[0]
    print()
    print(table.to_markdown(index=False, floatfmt=",.2f"))


if __name__ == "__main__":
    main()
