"""biasaudit: nightly, versioned fairness audits of deployed binary classifiers.

The repository root is this package: ``biasaudit.flows`` (Prefect flows and the CLI),
``biasaudit.tasks`` (the pure stages and the audit core), ``biasaudit.schemas`` (Pandera schemas,
configuration, metric ids) and ``biasaudit.db`` (tables, migrations, persistence, history).
"""
