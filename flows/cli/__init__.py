"""The ``biasaudit`` command line, one module per group of commands.

Commands that do not run a flow (history, load, db, audits, quarantine) never import Prefect, so
they start fast. Every mistake an operator can make prints one line ``error: ...`` and exits with
a non-zero code; ``--debug`` shows the traceback instead (docs/cli.md, "Mistakes and their
messages"). Data is printed as plain text, never as terminal markup, and a database password never
reaches the output (``db.engine.safe_url``) nor Prefect (``db.engine.flow_url``).
"""

from biasaudit.flows.cli import data, history, planning, runs  # noqa: F401 (they register commands)
from biasaudit.flows.cli.common import app

__all__ = ["app"]

if __name__ == "__main__":
    app()
