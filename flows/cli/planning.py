"""Commands about metrics and sample sizes before and across runs: `plan`, `rank`, `metrics`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from biasaudit.flows.cli.common import (
    DbOption,
    Mistake,
    _engine,
    _fail,
    _metric,
    _print_frame,
    _say,
    app,
    console,
)


@app.command()
def plan(
    metric: Annotated[str, typer.Option(help="ppr, tpr, fnr, tnr, fpr, ppv, npv or acc")],
    rate: Annotated[
        list[float], typer.Option(help="Expected rate of the metric in a group (repeat)")
    ],
    prev: Annotated[
        list[float] | None, typer.Option(help="Prevalence per group (for tpr/fnr/tnr/fpr)")
    ] = None,
    ppr: Annotated[
        list[float] | None, typer.Option(help="Selection rate per group (for ppv/npv)")
    ] = None,
    tau: Annotated[
        float | None, typer.Option(help="Disparity to detect (default: the gap)")
    ] = None,
    alpha: Annotated[float, typer.Option(help="Significance level")] = 0.05,
    power: Annotated[float, typer.Option(help="Power")] = 0.80,
) -> None:
    """How many predictions per group an audit needs, before any data exists."""
    import numpy as np

    from biasaudit.tasks.planning import plan_from_rates

    try:
        result = plan_from_rates(_metric(metric), rate, prev, ppr, tau, alpha, power)
    except ValueError as exc:
        _fail(str(exc))
    g1, g2 = result["groups compared"]
    console.print(
        f"{metric}: group {g1 + 1} at {rate[g1]:.3f} vs group {g2 + 1} at {rate[g2]:.3f}; "
        f"detect a disparity of {result['tau']:.3f} at α = {alpha}, power {power}"
    )
    table = Table(title="predictions to collect (labelled, per group)")
    for column in ("allocation", f"group {g1 + 1}", f"group {g2 + 1}", "total"):
        table.add_column(column, justify="right")
    for name in ("equal allocation", "neyman allocation"):
        n1, n2 = (int(np.ceil(v)) for v in result[name])
        table.add_row(name.split()[0], f"{n1:,}", f"{n2:,}", f"{n1 + n2:,}")
    console.print(table)
    console.print(
        f"bias measure N (sample-size-bias-measure eq. 1, per group, one-sided): "
        f"{int(np.ceil(result['bias measure N per group'])):,}; difference "
        f"{result['difference']:+.3f}; ratio {result['ratio']:.3f}"
    )
    if "chi-square per group" in result:
        console.print(
            f"chi-square test of all {len(rate)} groups: "
            f"{int(np.ceil(result['chi-square per group'])):,} per group"
        )


@app.command()
def rank(
    run_ids: Annotated[list[int], typer.Argument(help="Runs of the models to rank")],
    metric: Annotated[str, typer.Option(help="Error rate to compare, e.g. fnr or fpr")],
    attribute: Annotated[str, typer.Option(help="Sensitive attribute")],
    group: Annotated[str, typer.Option(help="Group")],
    reference: Annotated[str, typer.Option(help="Reference group, or 'rest'")] = "rest",
    db: DbOption = None,
) -> None:
    """Rank models for bias by N, difference and ratio, and show where the rankings disagree."""
    from biasaudit.db.store.history import rates_by_run
    from biasaudit.schemas.metric_ids import BASE_RATES, GLOSSARY, TESTED_RATES
    from biasaudit.tasks.planning import rank_bias

    metric = _metric(metric)
    if metric in BASE_RATES:
        raise Mistake(
            f"--metric {metric} ({GLOSSARY[metric][0]}) is the outcome's base rate, context that "
            f"is never tested, so no model is ranked by it; rank by one of {', '.join(TESTED_RATES)}"
        )
    rates = rates_by_run(_engine(db), run_ids, attribute, group, reference, metric)
    missing = sorted(set(run_ids) - set(rates["run_id"]))
    if missing:
        _fail(f"runs {missing} have no {metric} of {attribute}={group} against {reference}")
    ranked = rank_bias(rates)
    columns = [
        "run_id",
        "audit_name",
        "model_id",
        "version",
        "value_group",
        "value_reference",
        "difference",
        "ratio",
        "bias_n",
        "rank_difference",
        "rank_ratio",
        "rank_bias_n",
        "disagree",
    ]
    _print_frame(
        ranked[columns],
        title=f"{metric} of {attribute}={group} vs {reference}: "
        "rank 1 = least biased (smallest D and R, largest N)",
    )


@app.command()
def metrics() -> None:
    """List every metric: its id, name and formula, and whether audits test it between groups."""
    from biasaudit.schemas.metric_ids import GLOSSARY, METRIC_IDS, N_MEANS, SYNONYMS, describe, role

    _say(f"metrics ({N_MEANS}); an id, a name or a synonym may be given wherever a metric is:")
    for metric in METRIC_IDS:
        name = GLOSSARY[metric][0].lower().replace(" ", "_")
        also = [s for s, m in SYNONYMS.items() if m == metric and s != name]
        _say(
            f"{describe(metric)}\n    {role(metric)}"
            + (f"; also: {', '.join(also)}" if also else "")
        )
