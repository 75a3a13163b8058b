"""`autotune eval` (one configuration, measured once) and `autotune evalset`."""

from __future__ import annotations

import click

from autotune.cli.base import (
    FiniteFloatRange,
    _fail,
    adapter_option,
    dummy_weights_option,
    endpoint_option,
    json_option,
    json_text,
    main,
    user_errors,
)
from autotune.space.settings import MAX_TRIAL_TIMEOUT_S


@main.command(name="eval")
@click.option("--space", required=True, help="Space name (search_spaces/NAME.yaml) or path.")
@click.option("--model", default=None, help="Hub id or local checkpoint; overrides the space.")
@click.option("--evalset", default=None, help="Bundled set name, folder or JSONL file.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help=(
        "Override one parameter of the reference configuration (repeatable). Values are YAML"
        " scalars; full size is image_max_side=null (or None)."
    ),
)
@click.option(
    "--timeout-s",
    type=FiniteFloatRange(1, MAX_TRIAL_TIMEOUT_S),
    default=None,
    help="Give the measurement this long (seconds) before it fails as timed out, in place of "
    "the space's trial_timeout_s; a busy machine may need longer.",
)
@endpoint_option
@dummy_weights_option
@adapter_option
@json_option
@user_errors
def eval_command(
    space: str,
    model: str | None,
    evalset: str | None,
    params: tuple[str, ...],
    endpoint: str | None,
    dummy_weights: bool,
    adapter_specs: tuple[str, ...],
    as_json: bool,
    timeout_s: float | None,
) -> None:
    """Score one configuration (the space's reference, with --param overrides). Its progress
    goes to stderr: each phase, the accuracy pass's items answered, a line every 30 s."""
    from autotune.checkpoints.adapters import parse_adapters
    from autotune.errors import TrialFailure
    from autotune.evaluate import EvalProgress, configured, evaluate, parse_overrides, with_timeout
    from autotune.space import load_space
    from autotune.study import plan_study

    overrides = parse_overrides(params)
    loaded = with_timeout(load_space(space), timeout_s)
    # A bad --param fails before any loading.
    configured(loaded.reference_config(), overrides, device=loaded.device)
    plan = plan_study(
        loaded,
        model=model,
        evalset=evalset,
        endpoint=endpoint,
        dummy_weights=dummy_weights,
        adapters=parse_adapters(adapter_specs),
    )
    try:
        with EvalProgress(plan.space.trial_timeout_s) as progress:
            result = evaluate(plan, overrides, endpoint=plan.endpoint, on_phase=progress)
    except TrialFailure as failure:
        # One measurement is all eval makes: its failure is the command's, not a trial's.
        longer = "; --timeout-s SECONDS gives it longer" if failure.kind == "timeout" else ""
        _fail(
            f"the configuration could not be measured: {failure.kind}: {failure.reason}{longer}",
            1,
        )
    if as_json:
        click.echo(json_text(result.to_json()))
        return
    click.echo(f"{result.model} on {result.evalset} ({result.items} items)")
    if result.accuracy is None:
        click.echo("accuracy: not measured (dummy weights: random answers)")
    else:
        click.echo(f"accuracy: {result.accuracy:.3f}")
    for name, value in result.accuracy_by_category.items():
        click.echo(f"  {name}: {value:.3f}")
    for name, value in result.figures.items():
        click.echo(f"{name}: {value:.4g}")


@main.group()
def evalset() -> None:
    """Inspect and check evaluation sets."""


@evalset.command("validate")
@click.argument("path")
@user_errors
def evalset_validate(path: str) -> None:
    """Check a JSONL evaluation set (fields, metrics, images); exit 2 on the first problem."""
    from autotune.evalset.dataset import load_evalset

    loaded = load_evalset(path)
    click.echo(f"ok: {loaded.path}: {len(loaded.items)} items")


@evalset.command("show")
@click.argument("name_or_path", required=False, default="smoke")
@json_option
@user_errors
def evalset_show(name_or_path: str, as_json: bool) -> None:
    """Item count, categories and metrics of a bundled or own set (default: smoke)."""
    from autotune.evalset.dataset import available_evalsets, load_evalset, summary

    info = summary(load_evalset(name_or_path))
    if as_json:
        click.echo(json_text(info))
        return
    click.echo(f"{info['name']}: {info['items']} items ({info['path']})")
    click.echo("categories: " + ", ".join(f"{k} {v}" for k, v in info["categories"].items()))
    click.echo("metrics: " + ", ".join(f"{k} {v}" for k, v in info["metrics"].items()))
    click.echo("bundled sets: " + ", ".join(available_evalsets()))


@evalset.command("needs")
# Finite ranges: NaN passes every range check, and would print a table of capped medians.
@click.option("--max-drop", type=FiniteFloatRange(0.001, 0.5), default=0.02, show_default=True)
@click.option("--confidence", type=FiniteFloatRange(0.5, 0.999), default=0.9, show_default=True)
@click.option("--evalset", "name_or_path", default=None, help="Also say what this set can decide.")
@click.option(
    "--held-out",
    type=click.IntRange(0, 10_000_000),
    default=None,
    help="Items of --evalset held out to confirm the recommendation, which the search floor "
    "never reads (default: what a study at this floor holds out of the set: what answers "
    "differing on 5% need, after the search floor's own need).",
)
@json_option
@user_errors
def evalset_needs(
    max_drop: float,
    confidence: float,
    name_or_path: str | None,
    held_out: int | None,
    as_json: bool,
) -> None:
    """Items the sequential accuracy floor spends to pass a candidate as accurate as the
    reference, by how often the two answer differently (simulated with the floor's own code)."""
    from autotune.accuracy.confirm import SIZING_DISCORDANCE, holdout_items, holdout_size
    from autotune.accuracy.reach import SIMULATED_ITEMS, needs_rows, set_reach
    from autotune.space.settings import AccuracyConstraint

    rows = needs_rows(max_drop, confidence)
    held = {
        f"{d:.0%}": holdout_items(max_drop=max_drop, confidence=confidence, discordance=d)
        for d in (0.0, SIZING_DISCORDANCE)
    }
    reach = None
    if name_or_path is not None:
        from autotune.evalset.dataset import load_evalset

        size = len(load_evalset(name_or_path).items)
        # As a study sizes it in this set: the search floor's need first (confirm.holdout_size).
        floor = AccuracyConstraint(max_drop=max_drop, confidence=confidence)
        kept = holdout_size(floor, size) if held_out is None else held_out
        reach = set_reach(size, max_drop=max_drop, confidence=confidence, held_out=kept)
    if as_json:
        report = {"max_drop": max_drop, "confidence": confidence, "rows": rows}
        report |= {"items": reach.items if reach else None, "holdout_items": held}
        if reach is not None:
            report |= {"held_out": reach.held_out, "search_items": reach.search_items}
            report |= {"reach": reach.reach, "can_decide": reach.sentence()}
        click.echo(json_text(report))
        return
    click.echo(
        f"sequential floor, max_drop {max_drop:g}, confidence {confidence:g}: items spent to pass "
        "a candidate exactly as accurate as the reference"
    )
    click.echo("answers differ on | median items | items to pass 9 times in 10")
    for row in rows:
        p90 = row["items_for_90pct"]
        shown = f"{p90:,.0f}" if p90 < SIMULATED_ITEMS else f"over {SIMULATED_ITEMS:,}"
        click.echo(f"{row['discordance']:>15.0%}   | {row['median_items']:>12,.0f} | {shown}")
    click.echo(
        f"held out to confirm the recommendation (error at most {1 - confidence:.2g} for the "
        f"whole study): {held['5%']:,} items (a candidate differing on 5% of items confirmed "
        f"9 times in 10), {held['0%']:,} with identical_answers_only"
    )
    if reach is not None:
        # The very sentence a study's warning prints (autotune.accuracy.reach).
        click.echo(f"{name_or_path}: {reach.sentence()}")


@evalset.command("build")
@click.argument("name")
@user_errors
def evalset_build(name: str) -> None:
    """Build an evaluation pool into studies/evalsets/ (done by its first use otherwise), or
    check the one built there file by file against its build."""
    from autotune.evalset.pools import ensure_pool

    click.echo(f"{name}: {ensure_pool(name)} (every file as its build wrote it)")
