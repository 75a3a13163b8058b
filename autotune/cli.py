"""The `autotune` command line: thin wrappers over library functions.

Heavy modules (torch, transformers, optuna) are imported inside the commands, so `autotune
--help` stays fast. Every AutotuneError becomes one `error:` line and exit status 2, and so does
every usage error click finds (a bad option value, an unknown option).
"""

from __future__ import annotations

import functools
import json
import math
import sys
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import click

from autotune import __version__
from autotune.errors import AutotuneError

F = TypeVar("F", bound=Callable[..., Any])


def one_line(message: str) -> str:
    """`message` as a single printable line: line breaks become '; ', control characters
    (from a file name or a URL someone typed) are escaped rather than printed."""
    joined = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    return "".join(
        ascii(char)[1:-1] if unicodedata.category(char) in ("Cc", "Zl", "Zp") else char
        for char in joined
    )


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(code)


def user_errors(func: F) -> F:
    """Turn user-fixable errors and Ctrl-C into one line and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AutotuneError as exc:
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            click.echo(
                "interrupted: running trials were stopped and marked failed; run the same "
                "command again to resume",
                err=True,
            )
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


class OneLineUsageError(click.UsageError):
    """A usage error printed the way autotune prints its own: one `error:` line."""

    def show(self, file: Any = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"error: {one_line(self.format_message())}{hint}", err=True)


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except (OneLineUsageError, click.exceptions.NoArgsIsHelpError):
        raise  # already one line; or the help text that a bare group prints on purpose
    except click.UsageError as exc:
        raise OneLineUsageError(exc.format_message(), exc.ctx) from None


class AutotuneGroup(click.Group):
    """click's usage errors (bad option values, unknown options) as one `error:` line too,
    instead of the usage block click prints: every mistake reads the same way."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _one_line_usage_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_usage_errors():
            return super().invoke(ctx)


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that refuses NaN (it passes every range check) and infinities."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.types.FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def _check_study_name(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    from autotune.space.model import check_name

    if value is None:
        return None
    try:
        return check_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _check_endpoint(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    from autotune.client.chat import normalize_base_url

    if value is None:
        return None
    try:
        normalize_base_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


study_option = click.option(
    "--study", "study_name", default=None, callback=_check_study_name, help="Study name."
)
storage_option = click.option(
    "--storage",
    default=None,
    help="SQLAlchemy URL or a .journal file (default studies/<study>.db, or "
    "studies/<study>.journal for several workers).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
trial_option = click.option(
    "--trial", "trial_number", type=int, default=None, help="Trial number (default: recommended)."
)
dummy_weights_option = click.option(
    "--dummy-weights",
    is_flag=True,
    help="Random weights of the model's real architecture (no checkpoint download): speed "
    "studies only; accuracy is switched off.",
)
adapter_option = click.option(
    "--adapter",
    "adapter_specs",
    multiple=True,
    metavar="NAME=PATH",
    help="Serve this PEFT LoRA adapter on the model and measure requests against it "
    "(repeatable: the first is measured, all are exported).",
)
endpoint_option = click.option(
    "--endpoint",
    default=None,
    metavar="URL",
    callback=_check_endpoint,
    help="Measure this running OpenAI-compatible server (http://host:port) instead of starting "
    "one; only request-side parameters are searched.",
)


@click.group(cls=AutotuneGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autotune")
def main() -> None:
    """Find the fastest way to serve a vision-language model without losing accuracy."""


@main.command()
@click.option("--space", required=True, help="Space name (search_spaces/NAME.yaml) or path.")
@click.option("--model", default=None, help="Hub id or local checkpoint; overrides the space.")
@click.option("--trials", type=click.IntRange(min=1), default=None, help="Total trials wanted.")
@study_option
@storage_option
@click.option("--timeout", type=FiniteFloatRange(min=1), default=None, help="Stop after seconds.")
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
@click.option("--worker", is_flag=True, hidden=True, help="Internal: one worker of --gpus.")
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
    worker: bool,
) -> None:
    """Run (or resume) a study over a search space."""
    from autotune.checkpoints.adapters import parse_adapters
    from autotune.engines.gpus import select_gpus
    from autotune.space import load_space, with_enqueued
    from autotune.study import plan_study, run_study
    from autotune.study.progress import Progress

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
    )
    total = trials if trials is not None else loaded.trials
    if worker:
        from autotune.study.loop import optimize

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
            from autotune.study.workers import run_on_workers

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
                *(arg for spec in adapter_specs for arg in ("--adapter", spec)),
            ]
            study = run_on_workers(plan, args, target=total, progress=progress)
        else:
            study = run_study(plan, trials=total, timeout_s=timeout, progress=progress)
    from autotune.report.text import best_text, failures_text
    from autotune.study.select import has_completed_trial
    from autotune.study.storage import display_url

    click.echo(f"study stored in {display_url(plan.storage_url)}", err=True)
    if not has_completed_trial(study):
        # Every trial failed: say why, per trial, instead of an empty recommendation.
        click.echo(failures_text(study))
        sys.exit(1)
    click.echo(best_text(study))


def _option_duration(name: str, value: str | None) -> float | None:
    from autotune.space import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise AutotuneError(f"{name}: {exc}") from None


@main.command()
@study_option
@storage_option
@json_option
@user_errors
def best(study_name: str | None, storage: str | None, as_json: bool) -> None:
    """Show the feasible Pareto front and the recommended trial."""
    from autotune.report.text import best_json, best_text
    from autotune.study.storage import load_study

    study = load_study(study_name, storage)
    click.echo(json.dumps(best_json(study), indent=2) if as_json else best_text(study))


@main.command()
@study_option
@storage_option
@trial_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["swift", "lmdeploy", "vllm", "yaml"]),
    default=None,
    help="Target; default: the study's deploy target (the space's `deploy:`).",
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
    from autotune.study.exports import export_trial
    from autotune.study.storage import load_study

    study = load_study(study_name, storage)
    result, trial = export_trial(study, trial_number=trial_number, fmt=fmt, host=host, port=port)
    if strict and not result.exact:
        raise ExportError(
            f"trial {trial.number} cannot be expressed exactly as a command for {result.format}: "
            + " ".join(result.blockers)
        )
    if as_json:
        click.echo(json.dumps({"trial": trial.number, **result.to_dict()}, indent=2))
    else:
        click.echo(result.text)


@main.command()
@study_option
@storage_option
@trial_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["swift", "lmdeploy", "vllm"]),
    default=None,
    help="Command to relaunch. Default: the study's deploy target.",
)
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
    help="How much worse (relative) throughput and latency may be than recorded.",
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
    adapter_specs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Relaunch the recommended (or a chosen) trial's command and check its figures.

    Exit status 0 when every figure is within tolerance, 1 when not.
    """
    from autotune.checkpoints.adapters import parse_adapters
    from autotune.study.storage import load_study
    from autotune.verify import verify_text, verify_trial

    adapters = parse_adapters(adapter_specs)
    study = load_study(study_name, storage)
    result = verify_trial(
        study,
        trial_number=trial_number,
        fmt=fmt,
        endpoint=endpoint,
        tolerance=tolerance,
        on_phase=lambda phase: click.echo(f"verify: {phase}", err=True),
        adapters=adapters or None,
    )
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else verify_text(result))
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
    from autotune.study.storage import display_url

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
@user_errors
def report(study_name: str | None, storage: str | None, out_path: str) -> None:
    """Write a self-contained HTML report of the study (opens offline)."""
    from autotune.report.html import write_report

    path = write_report(study_name, storage, out=out_path)
    click.echo(f"report written to {path}")


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
        click.echo(json.dumps(result, indent=2))
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
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"{info['name']}: {info['items']} items ({info['path']})")
    click.echo("categories: " + ", ".join(f"{k} {v}" for k, v in info["categories"].items()))
    click.echo("metrics: " + ", ".join(f"{k} {v}" for k, v in info["metrics"].items()))
    click.echo("bundled sets: " + ", ".join(available_evalsets()))


if __name__ == "__main__":
    main()
