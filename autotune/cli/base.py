"""The `autotune` command line: thin wrappers over library functions.

Heavy modules (torch, transformers, optuna) are imported inside the commands, so `autotune
--help` stays fast. Every AutotuneError becomes one `error:` line and exit status 2, and so does
every usage error click finds (a bad option value, an unknown option).

This module: the group, its one-line errors and the options commands share.
"""

from __future__ import annotations

import functools
import json
import math
import os
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


def json_text(data: dict[str, Any]) -> str:
    """`data` as JSON for scripts. NaN and infinities are not JSON: such a figure is null,
    and `null_because` says, by path, what was stored in its place."""
    nulls: dict[str, str] = {}

    def clean(value: Any, path: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            nulls[path] = f"not a finite number ({value})"
            return None
        if isinstance(value, dict):
            return {
                key: clean(item, f"{path}.{key}" if path else str(key))
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [clean(item, f"{path}[{index}]") for index, item in enumerate(value)]
        return value

    document = clean(data, "")
    if nulls:
        document["null_because"] = nulls
    return json.dumps(document, indent=2, allow_nan=False)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(code)


# The exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130
# Ctrl-C before a command began its work (reading its arguments, its imports).
NOTHING_STARTED = "before the command started; nothing was run or written"


def interrupted(message: str) -> NoReturn:
    """Ctrl-C: one line, status 130, no traceback. Before a command started, nothing needs
    cleaning up: os._exit, because an interrupt that passed through an extension's own PyRun
    call during an import has Python end by SIGINT (status -2) whatever sys.exit says."""
    click.echo(f"interrupted: {message}", err=True)
    if message == NOTHING_STARTED:
        sys.stderr.flush()
        os._exit(INTERRUPTED)
    sys.exit(INTERRUPTED)


def user_errors(func: F) -> F:
    """Turn user-fixable errors and Ctrl-C into one line and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AutotuneError as exc:
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            interrupted(
                "running trials were stopped and marked failed; run the same command again to "
                "resume"
            )

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
    instead of the usage block click prints: every mistake reads the same way. The AUTOTUNE_*
    environment variables are checked before any command runs (autotune.variables), and a
    Ctrl-C that comes before a command's own handling is status 130, not click's 'Aborted!'."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            with _one_line_usage_errors():
                return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            interrupted(NOTHING_STARTED)

    def invoke(self, ctx: click.Context) -> Any:
        from autotune import variables

        try:
            variables.check_all()
            with _one_line_usage_errors():
                return super().invoke(ctx)
        except AutotuneError as exc:  # a variable's; a command turns its own into a line
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            interrupted(NOTHING_STARTED)


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
    "--trial",
    "trial_number",
    type=click.IntRange(0, 2**31 - 1),  # a number past SQLite's integers is no trial
    default=None,
    help="Trial number (default: recommended).",
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
