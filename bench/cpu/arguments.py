"""Argument types for the benchmark scripts: a value they cannot use is refused by argparse in
one line (exit 2) instead of a traceback or a run that reports nonsense as a result."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn


def positive_minutes(text: str) -> float:
    """A finite number of minutes above zero ('0', '-5', 'nan' and 'inf' are no budget)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of minutes above 0")
    return value


def whole_number(least: int) -> Callable[[str], int]:
    """A whole number in ASCII digits, at least `least` (and at most a million)."""

    def parse(text: str) -> int:
        stripped = text.strip()
        digits = stripped.removeprefix("-")
        if not digits or not all("0" <= c <= "9" for c in digits) or len(digits) > 7:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        value = int(stripped)
        if value < least or value > 1_000_000:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give a whole number from {least} to 1000000"
            )
        return value

    return parse


def choices_list(known: tuple[str, ...]) -> Callable[[str], list[str]]:
    """A comma-separated list of names out of `known`, at least one, none twice."""

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",")]
        if not text.strip() or any(not name for name in names):
            raise argparse.ArgumentTypeError(
                f"{text!r}: give one or more of {', '.join(known)}, separated by commas"
            )
        unknown = [name for name in names if name not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"{unknown[0]!r} is not one of {', '.join(known)}")
        if len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"{text!r}: a name is given twice")
        return names

    return parse


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, its errors in one line (no usage block before it), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")
