"""`autotune run`: one study, on one GPU or one worker per GPU set."""

from __future__ import annotations

import sys

import click

from autotune.cli.base import (
    FiniteFloatRange,
    adapter_option,
    dummy_weights_option,
    endpoint_option,
    main,
    storage_option,
    study_option,
    user_errors,
)
from autotune.errors import AutotuneError


@main.command()
@click.option("--space", required=True, help="Space name (search_spaces/NAME.yaml) or path.")
@click.option("--model", default=None, help="Hub id or local checkpoint; overrides the space.")
@click.option(
    "--trials",
    type=click.IntRange(min=1, max=100_000),
    default=None,
    help="Total trials wanted (at most 100,000).",
)
@study_option
@storage_option
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=1, max=30 * 86_400),
    default=None,
    help="Stop after seconds (at most 30 days).",
)
@click.option(
    "--budget",
    default=None,
    metavar="DURATION",
    help="Trial time for the whole study, e.g. 30m or 1h (overrides the space's budget); no "
    "trial is started that cannot finish inside it.",
)
@click.option("--quiet", is_flag=True, help="Only the final summary.")
@click.option("--evalset", default=None, help="Bundled set name, folder or JSONL file.")
@endpoint_option
@dummy_weights_option
@click.option(
    "--gpus",
    "gpus_spec",
    default=None,
    metavar="all|0,1,...",
    help="Run one trial per GPU at a time (workers share the study; a tensor_parallel launch "
    "takes several). Several workers store the study in studies/<study>.journal.",
)
@adapter_option
@click.option(
    "--enqueue",
    "enqueue_file",
    default=None,
    metavar="FILE.yaml",
    help="Named configurations (a list of {name, config}) measured right after the "
    "reference, labelled in best and the report.",
)
@click.option(
    "--allow-other-machine",
    is_flag=True,
    help="Resume a study measured on another GPU kind, host CPU or engine version: this "
    "machine's trials form a comparison group of their own, ranked and raced among themselves.",
)
@click.option(
    "--worker", type=int, default=None, hidden=True, help="Internal: this worker's slot of --gpus."
)
@user_errors
def run(
    space: str,
    model: str | None,
    trials: int | None,
    study_name: str | None,
    storage: str | None,
    timeout: float | None,
    budget: str | None,
    quiet: bool,
    evalset: str | None,
    endpoint: str | None,
    dummy_weights: bool,
    gpus_spec: str | None,
    adapter_specs: tuple[str, ...],
    enqueue_file: str | None,
    allow_other_machine: bool,
    worker: int | None,
) -> None:
    """Run (or resume) a study over a search space."""
    from autotune.checkpoints.adapters import parse_adapters
    from autotune.engines.gpus import select_gpus
    from autotune.space import load_space, with_enqueued
    from autotune.study import plan_study, run_study
    from autotune.study.results.progress import Progress

    budget_s = _option_duration("--budget", budget)
    loaded = load_space(space)
    if enqueue_file is not None:
        loaded = with_enqueued(loaded, enqueue_file)
    adapters = parse_adapters(adapter_specs)
    plan = plan_study(
        loaded,
        model=model,
        study_name=study_name,
        storage_url=storage,
        endpoint=endpoint,
        evalset=evalset,
        dummy_weights=dummy_weights,
        budget_s=budget_s,
        gpus=select_gpus(gpus_spec) if gpus_spec is not None else None,
        adapters=adapters,
        allow_other_machine=allow_other_machine,
    )
    total = trials if trials is not None else loaded.trials
    if worker is not None:
        from autotune.study.run.loop import optimize

        plan.worker = worker
        with Progress(total=total, quiet=quiet, live=False) as progress:
            optimize(plan, target=total, timeout_s=timeout, progress=progress)
        return
    if plan.endpoint is not None and not quiet:
        searched = ", ".join(plan.space.params) or "nothing"
        click.echo(
            f"endpoint mode: measuring {plan.endpoint} (autotune starts no server); searching "
            f"request-side parameters only: {searched}. Server-side values in the results are "
            "the reference's and say nothing about that server; start-up time and memory are "
            "not measured.",
            err=True,
        )
    # The context manager takes the progress bar down on Ctrl-C too.
    with Progress(total=total, quiet=quiet, live=plan.workers == 1) as progress:
        if plan.workers > 1:
            from autotune.study.run.workers import run_on_workers

            args = [
                *("--space", space, "--study", plan.study_name, "--storage", plan.storage_url),
                *("--trials", str(total), "--gpus", str(gpus_spec)),
                *(("--model", model) if model else ()),
                *(("--timeout", str(timeout)) if timeout else ()),
                *(("--budget", f"{plan.budget_s}s") if plan.budget_s else ()),
                *(("--evalset", evalset) if evalset else ()),
                *(("--dummy-weights",) if dummy_weights else ()),
                *(("--quiet",) if quiet else ()),
                *(("--enqueue", enqueue_file) if enqueue_file else ()),
                *(("--allow-other-machine",) if allow_other_machine else ()),
                *(arg for spec in adapter_specs for arg in ("--adapter", spec)),
            ]
            study = run_on_workers(plan, args, target=total, progress=progress)
        else:
            study = run_study(plan, trials=total, timeout_s=timeout, progress=progress)
    from autotune.report.text import best_text, failures_text
    from autotune.study.results.groups import groups_lines, in_group, ranked_group
    from autotune.study.results.select import has_completed_trial
    from autotune.study.store.storage import display_url

    click.echo(f"study stored in {display_url(plan.storage_url)}", err=True)
    if not has_completed_trial(study):
        # Every trial failed: say why, per trial, instead of an empty recommendation.
        click.echo(failures_text(study))
        sys.exit(1)
    click.echo(best_text(in_group(study, plan.group)))
    for line in groups_lines(study, ranked_group(study, plan.machine), plan.machine):
        click.echo(line)


def _option_duration(name: str, value: str | None) -> float | None:
    from autotune.space import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise AutotuneError(f"{name}: {exc}") from None
