"""`autotune eval` (one configuration, measured once) and `autotune evalset`."""

from __future__ import annotations

import click

from autotune.cli.base import (
    _fail,
    adapter_option,
    dummy_weights_option,
    endpoint_option,
    json_option,
    json_text,
    main,
    user_errors,
)


@main.command(name="eval")
@click.option("--space", required=True, help="Space name (search_spaces/NAME.yaml) or path.")
@click.option("--model", default=None, help="Hub id or local checkpoint; overrides the space.")
@click.option("--evalset", default=None, help="Bundled set name, folder or JSONL file.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override one parameter of the reference configuration (repeatable).",
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
) -> None:
    """Score one configuration (the space's reference, with --param overrides)."""
    from autotune.checkpoints.adapters import parse_adapters
    from autotune.errors import TrialFailure
    from autotune.evaluate import configured, evaluate, parse_overrides
    from autotune.space import load_space
    from autotune.study import plan_study

    overrides = parse_overrides(params)
    loaded = load_space(space)
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
        result = evaluate(plan, overrides, endpoint=plan.endpoint)
    except TrialFailure as failure:
        # One measurement is all eval makes: its failure is the command's, not a trial's.
        _fail(f"the configuration could not be measured: {failure.kind}: {failure.reason}", 1)
    if as_json:
        click.echo(json_text(result))
        return
    click.echo(f"{result['model']} on {result['evalset']} ({result['items']} items)")
    if result["accuracy"] is None:
        click.echo("accuracy: not measured (dummy weights: random answers)")
    else:
        click.echo(f"accuracy: {result['accuracy']:.3f}")
    for name, value in result["accuracy_by_category"].items():
        click.echo(f"  {name}: {value:.3f}")
    for name, value in result["figures"].items():
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
