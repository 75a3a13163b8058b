"""Commands that read a study: best, export, verify, dashboard and report."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from autotune.cli.base import (
    F,
    FiniteFloatRange,
    _check_endpoint,
    adapter_option,
    json_option,
    json_text,
    main,
    one_line,
    storage_option,
    study_option,
    trial_option,
    user_errors,
)
from autotune.params import DEPLOY_TARGETS


def price_option(function: F) -> F:
    """--gpu-price-per-hour: the cost per million output tokens; no price is assumed."""
    return click.option(
        "--gpu-price-per-hour",
        "gpu_price_per_hour",
        type=FiniteFloatRange(min=0, min_open=True, max=1e6),
        default=None,
        metavar="USD",
        help="Hourly price of the machine (USD): shows the cost per million output tokens of "
        "the recommendation and the baseline (over the space's gpu_price_per_hour).",
    )(function)


@main.command()
@study_option
@storage_option
@json_option
@price_option
@user_errors
def best(
    study_name: str | None, storage: str | None, as_json: bool, gpu_price_per_hour: float | None
) -> None:
    """Show the feasible Pareto front, the recommended trial and its gain over the deploy
    engine's defaults."""
    from optuna.trial import TrialState

    from autotune.errors import StudyError
    from autotune.records.readable import unreadable_trials
    from autotune.report.text import best_json, best_text, failures_text
    from autotune.study.results.groups import (
        groups_lines,
        groups_summary,
        in_group,
        machine_here,
        ranked_group,
    )
    from autotune.study.results.select import has_completed_trial
    from autotune.study.store.storage import load_study

    study = load_study(study_name, storage)
    # Ranked within one comparison group: the figures of another machine are listed apart.
    machine = machine_here(study)
    ranked = ranked_group(study, machine)
    view = in_group(study, ranked.id if ranked is not None else None)
    if as_json:
        groups = groups_summary(study, ranked, machine)
        data = best_json(view, gpu_price_per_hour=gpu_price_per_hour)
        click.echo(
            json_text({**data, "comparison_groups": groups, "unreadable": _unreadable(study)})
        )
    else:
        ended = study.get_trials(deepcopy=False, states=(TrialState.FAIL, TrialState.PRUNED))
        if ended and not has_completed_trial(study) and not unreadable_trials(study):
            # No trial completed, some failed: why each ended (as `run` says it), then the
            # one error line. Records that cannot be read are named by their own lines instead.
            click.echo(failures_text(study))
            raise StudyError(f"study '{study.study_name}' has no completed trial: each failed")
        click.echo(best_text(view, gpu_price_per_hour=gpu_price_per_hour))
        for line in groups_lines(study, ranked, machine):
            click.echo(line)
    _warn_impossible_repeats(study)
    _exit_if_unreadable(study)


def _warn_impossible_repeats(study: Any) -> None:
    """One line for each stored duplicate_of that does not hold (the trial is ranked on its
    own figures: autotune.records.repeats)."""
    from autotune.records.repeats import impossible_repeats

    for line in impossible_repeats(study.get_trials(deepcopy=False)):
        click.echo(f"warning: study '{study.study_name}', {one_line(line)}", err=True)


def _unreadable(study: Any) -> dict[str, str]:
    from autotune.records.readable import unreadable_reason, unreadable_trials

    return {str(t.number): unreadable_reason(t) for t in unreadable_trials(study)}


def _exit_if_unreadable(study: Any) -> None:
    """After what could be read is shown: one line per trial that could not, and status 2."""
    from autotune.records.readable import unreadable_line, unreadable_trials

    unread = unreadable_trials(study)
    for trial in unread:
        line = f"{unreadable_line(study.study_name, trial)}; it is left out: repair or delete it"
        click.echo(f"error: {one_line(line)}", err=True)
    if unread:
        sys.exit(2)


def format_option(formats: list[str], help_text: str) -> Callable[[F], F]:
    return click.option("--format", "fmt", type=click.Choice(formats), default=None, help=help_text)


@main.command()
@study_option
@storage_option
@trial_option
@format_option(
    [*DEPLOY_TARGETS, "yaml"],
    "Target; default: the study's deploy target (the space's `deploy:`).",
)
@click.option("--host", default="0.0.0.0", show_default=True, help="Address the server binds.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Server port.")
@click.option("--strict", is_flag=True, help="Fail when the command cannot match exactly.")
@json_option
@user_errors
def export(
    study_name: str | None,
    storage: str | None,
    trial_number: int | None,
    fmt: str | None,
    host: str,
    port: int | None,
    strict: bool,
    as_json: bool,
) -> None:
    """Print the deploy command of the recommended (or a chosen) trial."""
    from autotune.errors import ExportError
    from autotune.study.results.exports import export_trial
    from autotune.study.results.groups import ranked_view
    from autotune.study.store.storage import load_study

    study = ranked_view(load_study(study_name, storage))
    result, trial = export_trial(study, trial_number=trial_number, fmt=fmt, host=host, port=port)
    if strict and not result.exact:
        raise ExportError(
            f"trial {trial.number} cannot be expressed exactly as a command for {result.format}: "
            + " ".join(result.blockers)
        )
    if as_json:
        click.echo(json_text({"trial": trial.number, **result.to_dict()}))
    else:
        click.echo(result.text)


@main.command()
@study_option
@storage_option
@trial_option
@format_option(list(DEPLOY_TARGETS), "Command to relaunch. Default: the study's deploy target.")
@click.option(
    "--endpoint",
    default=None,
    metavar="URL",
    callback=_check_endpoint,
    help="Check this running OpenAI-compatible server instead of relaunching the command "
    "(default for a study run with --endpoint: that endpoint).",
)
@click.option(
    "--tolerance",
    type=FiniteFloatRange(0.0, 1.0),
    default=0.25,
    show_default=True,
    help="Allowance (relative to the recorded figure) added on each side of the study's "
    "throughput interval, and around its latencies.",
)
@click.option(
    "--one-sided",
    is_flag=True,
    help="Judge only figures worse than recorded; a relaunch faster or more accurate passes "
    "(default: two-sided, a figure outside its band above or below is a miss).",
)
@click.option(
    "--client",
    type=click.Choice(["guidellm"]),
    default=None,
    help="Also measure the relaunch with this outside load generator (the same requests, "
    "after autotune's own load test) and print both figures; needs "
    "pip install 'autotune[client-guidellm]'.",
)
@adapter_option
@json_option
@user_errors
def verify(
    study_name: str | None,
    storage: str | None,
    trial_number: int | None,
    fmt: str | None,
    endpoint: str | None,
    tolerance: float,
    one_sided: bool,
    client: str | None,
    adapter_specs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Relaunch the recommended (or a chosen) trial's command and check its figures.

    Exit status 0 when every judged figure lands in its band, 1 on a miss (above or below
    unless --one-sided) or when the --client tool could not measure.
    """
    from autotune.checkpoints.adapters import parse_adapters
    from autotune.study.results.groups import ranked_view
    from autotune.study.store.storage import load_study
    from autotune.verify import verify_trial
    from autotune.verify_text import verify_text

    if client is not None:
        from autotune.outside.check import check_client

        check_client(client)  # a missing tool is said before the study is even read
    adapters = parse_adapters(adapter_specs)
    study = ranked_view(load_study(study_name, storage))
    options: dict[str, Any] = {
        "fmt": fmt,
        "endpoint": endpoint,
        "tolerance": tolerance,
        "one_sided": one_sided,
        "on_phase": lambda phase: click.echo(f"verify: {phase}", err=True),
        "adapters": adapters or None,
    }
    if client is not None:
        from autotune.outside.check import cross_check, cross_check_text

        check = cross_check(study, client=client, trial_number=trial_number, **options)
        click.echo(json_text(check.to_dict()) if as_json else cross_check_text(check))
        sys.exit(0 if check.passed else 1)
    result = verify_trial(study, trial_number=trial_number, **options)
    click.echo(json_text(result.to_dict()) if as_json else verify_text(result))
    sys.exit(0 if result.passed else 1)


@main.command()
@study_option
@storage_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0 = any free."
)
@click.option(
    "--allow-edits", is_flag=True, help="Let the browser write to the study (notes, deletion)."
)
@user_errors
def dashboard(
    study_name: str | None, storage: str | None, host: str, port: int, allow_edits: bool
) -> None:
    """Serve optuna-dashboard for the study, with each trial's artifacts; Ctrl-C stops it."""
    from autotune.report.dashboard import create_dashboard
    from autotune.study.store.storage import display_url

    server = create_dashboard(study_name, storage, host=host, port=port, allow_edits=allow_edits)
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"warning: listening on {host}: anyone who can reach this machine can read the study",
            err=True,
        )
    click.echo(f"study '{server.study_name}' ({display_url(server.storage_url)})")
    if server.artifacts is None:
        click.echo("no artifacts stored for this study yet", err=True)
    # optuna-dashboard 0.21 does not read Optuna 5's named constraints.
    click.echo(
        "note: the dashboard's 'Best Trial' badges ignore the accuracy floor and other "
        "constraints; `autotune best` and `autotune report` show the feasible front",
        err=True,
    )
    click.echo(f"dashboard: {server.url}   (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("dashboard stopped", err=True)


@main.command()
@study_option
@storage_option
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False, writable=True),
    help="HTML file to write.",
)
@price_option
@user_errors
def report(
    study_name: str | None, storage: str | None, out_path: str, gpu_price_per_hour: float | None
) -> None:
    """Write a self-contained HTML report of the study (opens offline)."""
    from autotune.report.html import write_report
    from autotune.study.store.storage import load_study

    # Resolved once: a storage that cannot be read at all is refused before anything is
    # written, and the trials left out are named after the report is.
    study = load_study(study_name, storage)
    path = write_report(
        study.study_name, storage, out=out_path, gpu_price_per_hour=gpu_price_per_hour
    )
    click.echo(f"report written to {path}")
    _warn_impossible_repeats(study)
    _exit_if_unreadable(study)
