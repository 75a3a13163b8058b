"""Scoring metrics: normalisation, thresholds, Chinese, numbers, captions, the registry."""

from __future__ import annotations

import pytest

from autotune.errors import EvalsetError
from autotune.evalset.metrics import METRICS, get_metric, parse_number, tokens


def score(name: str, prediction: str, *answers: str) -> float:
    return get_metric(name)(prediction, list(answers))


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("  Hello   World. ", "hello world", 1.0),
        ("HELLO WORLD!", "hello world", 1.0),
        ('"AB12CD"', "AB12CD", 1.0),
        ("ＡＢ１２", "ab12", 1.0),  # full-width forms fold onto ASCII
        ("hello\nworld", "hello world", 1.0),
        ("hello worlds", "hello world", 0.0),
        ("AB12C", "AB12CD", 0.0),
        ("你好 世界。", "你好世界", 1.0),  # a space next to Chinese carries no meaning
    ],
)
def test_exact_match_normalises(prediction: str, reference: str, expected: float) -> None:
    assert score("exact_match", prediction, reference) == expected


def test_exact_match_takes_any_reference() -> None:
    assert score("exact_match", "Two", "2", "two") == 1.0
    assert score("exact_match", "three", "2", "two") == 0.0


def test_contains_is_ocrbench_style() -> None:
    assert score("contains", "The sign says: OPEN 24\nHOURS today", "open 24 hours") == 1.0
    assert score("contains", "The sign says closed", "open 24 hours", "open") == 0.0
    assert score("contains", "it is open.", "closed", "Open.") == 1.0


def test_anls_threshold() -> None:
    assert score("anls", "abcdefghij", "abcdefghij") == 1.0
    assert score("anls", "abcdefghiX", "abcdefghij") == pytest.approx(0.9)
    # Half the characters wrong is a wrong answer, not a misreading: nothing, not 0.5.
    assert score("anls", "abcxyz", "abcdef") == 0.0
    assert score("anls", "abXdef", "nothing like it", "abcdef") == pytest.approx(5 / 6)
    assert get_metric("anls").passed(0.9) and not get_metric("anls").passed(0.7)


def test_cer_is_one_minus_error_rate_clipped() -> None:
    assert score("cer", "hallo", "hello") == pytest.approx(0.8)
    assert score("cer", "hello", "hello") == 1.0
    assert score("cer", "completely different and much longer", "hi") == 0.0


def test_cer_counts_chinese_characters() -> None:
    assert score("cer", "你好世", "你好世界") == pytest.approx(0.75)
    assert score("cer", "你 好 世 界", "你好世界") == 1.0
    assert score("cer", "你好世介", "你好世界") == pytest.approx(0.75)


def test_token_f1_words_for_latin_characters_for_chinese() -> None:
    assert tokens("Hello, world! 今天 AB-12") == ["hello", "world", "今", "天", "ab", "12"]
    assert score("token_f1", "the cat sat", "the cat sat down") == pytest.approx(6 / 7)
    assert score("token_f1", "今天天气", "今天天气好") == pytest.approx(8 / 9)
    assert score("token_f1", "nothing shared", "entirely other") == 0.0


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("104", "100", 1.0),
        ("95.5", "100", 1.0),
        ("106", "100", 0.0),
        ("$1,050.00", "1000", 1.0),  # exactly 5% still counts
        ("The answer is 98.", "100", 1.0),
        ("between 90 and 100", "100", 0.0),  # two numbers: no single answer
        ("42%", "42", 1.0),
        ("0", "0", 1.0),
        ("0.01", "0", 0.0),
        ("Jan", "jan", 1.0),
        ("Feb", "Jan", 0.0),
    ],
)
def test_relaxed_accuracy(prediction: str, reference: str, expected: float) -> None:
    assert score("relaxed_accuracy", prediction, reference) == expected


def test_numeric_exact_strips_currency_and_separators() -> None:
    assert score("numeric_exact", "$45.20", "45.20") == 1.0
    assert score("numeric_exact", "45.2", "45.20") == 1.0
    assert score("numeric_exact", "45.21", "45.20") == 0.0
    assert score("numeric_exact", "555-123-4567", "(555) 123-4567") == 1.0
    assert score("numeric_exact", "2024/03/17", "2024-03-17") == 1.0
    assert score("numeric_exact", "2024-03-18", "2024-03-17") == 0.0


def test_parse_number() -> None:
    assert parse_number("¥1,234.5") == 1234.5
    assert parse_number("-3") == -3.0
    assert parse_number("2024-03-17") is None
    assert parse_number("no digits") is None


def test_fact_recall() -> None:
    refs = ["red circle|disc", "blue square|box", "green triangle", "yellow star"]
    caption = "A red circle, a large blue square and a green triangle on white."
    assert score("fact_recall", caption, *refs) == pytest.approx(0.75)
    assert score("fact_recall", "Two red discs and some blue boxes.", *refs[:2]) == 1.0
    # "red and blue circles" states both facts; a colour far from its shape states nothing.
    assert score("fact_recall", "red and blue circles", "red circle", "blue circle") == 1.0
    assert score("fact_recall", "a circle that is red", "red circle") == 0.0
    assert score("fact_recall", "a violet circle", "purple|violet circle") == 1.0


def test_keyword_recall_needs_whole_words() -> None:
    refs = ["cat|kitten", "cup|mug", "dog"]
    assert score("keyword_recall", "A cat next to two coffee mugs.", *refs) == pytest.approx(2 / 3)
    assert score("keyword_recall", "A category of things", "cat") == 0.0
    assert score("keyword_recall", "An astronaut in a space suit", "spacesuit|space suit") == 1.0


@pytest.mark.parametrize("name", sorted(METRICS))
def test_every_metric_scores_in_unit_interval(name: str) -> None:
    metric = METRICS[name]
    for prediction in ("", "x", "red circle 42", "你好", "a" * 200):
        value = metric(prediction, ["red circle", "42"])
        assert 0.0 <= value <= 1.0
    assert metric("red circle", ["red circle"]) == 1.0
    assert 0.0 < metric.pass_threshold <= 1.0
    assert metric.description


def test_unknown_metric_suggests_close_names() -> None:
    with pytest.raises(EvalsetError, match=r"did you mean 'exact_match'"):
        get_metric("exact")
    with pytest.raises(EvalsetError) as info:
        get_metric("zzz")
    assert "did you mean" not in str(info.value)
    assert "available: anls" in str(info.value)
