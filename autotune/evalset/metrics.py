"""Scoring metrics for evaluation items, registered by name.

Each metric maps a model answer and the item's reference answers to a score in [0, 1]; where an
item has several references the best one counts. The definitions follow the public benchmarks
they are named after (OCRBench, TextVQA, DocVQA ANLS, ChartQA relaxed accuracy, CC-OCR token F1)
so a score here means what it means there.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import jiwer
from rapidfuzz.distance import Levenshtein

from autotune.errors import EvalsetError

ScoreFn = Callable[[str, list[str]], float]

# CJK ideographs and CJK punctuation/full-width forms: scripts written without spaces.
_CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_CHAR = re.compile(f"[{_CJK}]")
_SPACE_NEXT_TO_CJK = re.compile(f"(?<=[{_CJK}])\\s+|\\s+(?=[{_CJK}])")
_TRAILING_PUNCT = ".,;:!?。，；：！？、"
_QUOTES = "\"'`“”‘’「」"
_TOKEN = re.compile(f"[{_CJK}]|[^\\W_]+")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_CURRENCY = re.compile(r"[$€£¥￥元]|\b(?:usd|eur|gbp|rmb|cny)\b")


@dataclass(frozen=True)
class Metric:
    """A named scoring function and the score at which an item counts as passed.

    The pass threshold turns graded scores into pass/fail outcomes, which paired tests
    (McNemar) between two configurations need.
    """

    name: str
    score: ScoreFn
    pass_threshold: float
    description: str

    def __call__(self, prediction: str, answers: list[str]) -> float:
        return self.score(prediction, answers)

    def passed(self, score: float) -> bool:
        return score >= self.pass_threshold


def normalize(text: str) -> str:
    """Lowercase, NFKC-fold, trim and collapse whitespace; drop spaces next to CJK characters.

    NFKC maps full-width Latin letters and digits onto ASCII. Spaces beside Chinese characters
    carry no meaning and OCR engines and models insert them inconsistently.
    """
    text = unicodedata.normalize("NFKC", text).lower()
    text = " ".join(text.split())
    return _SPACE_NEXT_TO_CJK.sub("", text)


def normalize_answer(text: str) -> str:
    """`normalize` plus stripping of surrounding quotes and trailing punctuation."""
    text = normalize(text).strip(_QUOTES + " ")
    return text.rstrip(_TRAILING_PUNCT + " ").strip(_QUOTES + " ")


def tokens(text: str) -> list[str]:
    """Words for Latin scripts, single characters for Chinese; punctuation is dropped."""
    return _TOKEN.findall(normalize(text))


def _best(prediction: str, answers: list[str], score: Callable[[str, str], float]) -> float:
    return max((score(prediction, ref) for ref in answers), default=0.0)


def exact_match(prediction: str, answers: list[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(ref) for ref in answers))


def contains(prediction: str, answers: list[str]) -> float:
    pred = normalize(prediction)
    return float(any(normalize_answer(ref) in pred for ref in answers if normalize_answer(ref)))


def _anls_one(prediction: str, reference: str) -> float:
    # DocVQA: an answer further than the threshold from the reference is a wrong answer, not
    # a misread one, and scores nothing.
    nl = Levenshtein.normalized_distance(normalize_answer(prediction), normalize_answer(reference))
    return 1.0 - nl if nl < 0.5 else 0.0


def anls(prediction: str, answers: list[str]) -> float:
    return _best(prediction, answers, _anls_one)


def _cer_one(prediction: str, reference: str) -> float:
    ref, hyp = normalize(reference), normalize(prediction)
    if not ref:
        return float(not hyp)
    return min(1.0, max(0.0, 1.0 - jiwer.cer(reference=ref, hypothesis=hyp)))


def cer(prediction: str, answers: list[str]) -> float:
    return _best(prediction, answers, _cer_one)


def _f1_one(prediction: str, reference: str) -> float:
    pred, ref = Counter(tokens(prediction)), Counter(tokens(reference))
    if not pred or not ref:
        return float(pred == ref)
    overlap = sum((pred & ref).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(pred.values()), overlap / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, answers: list[str]) -> float:
    return _best(prediction, answers, _f1_one)


def parse_number(text: str) -> float | None:
    """The number a short answer states, ignoring currency, thousand separators and a %.

    A sentence with exactly one number ("The total is $1,045.20.") counts as that number;
    anything with none or several is not a number.
    """
    text = _CURRENCY.sub("", normalize(text)).replace(",", "").replace("%", "")
    found = _NUMBER.findall(text)
    if len(found) != 1:
        return None
    # "2024-03-17" and "(555) 123-4567" hold several numbers, so they are compared as text.
    return float(found[0])


def _numeric_one(prediction: str, reference: str, *, tolerance: float) -> float:
    target = parse_number(reference)
    if target is None:
        return exact_match(prediction, [reference])
    value = parse_number(prediction)
    if value is None:
        return 0.0
    if target == 0:
        return float(value == 0)
    return float(abs(value - target) / abs(target) <= tolerance + 1e-12)


def relaxed_accuracy(prediction: str, answers: list[str]) -> float:
    return _best(prediction, answers, lambda p, r: _numeric_one(p, r, tolerance=0.05))


def _alnum(text: str) -> str:
    return "".join(ch for ch in normalize(text) if ch.isalnum())


def numeric_exact(prediction: str, answers: list[str]) -> float:
    def one(pred: str, ref: str) -> float:
        if parse_number(ref) is not None:
            return _numeric_one(pred, ref, tolerance=0.0)
        # Dates and phone numbers: the same characters, whatever the separators.
        return float(_alnum(pred) == _alnum(ref) != "")

    return _best(prediction, answers, one)


def _alternatives(part: str) -> list[str]:
    return [alt for alt in (a.strip().lower() for a in part.split("|")) if alt]


def _mentions(words: list[str], alternatives: list[str]) -> list[int]:
    """Positions where any alternative (one or more words, plural allowed) starts."""
    hits = []
    for alt in alternatives:
        parts = alt.split()
        for i in range(len(words) - len(parts) + 1):
            window = words[i : i + len(parts)]
            last = parts[-1]
            if window[:-1] == parts[:-1] and window[-1] in (last, last + "s", last + "es"):
                hits.append(i)
    return hits


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", normalize(text))


def fact_recall(prediction: str, answers: list[str]) -> float:
    """Fraction of "colour shape" facts the caption states.

    A fact is stated when its colour comes at most three words before its shape, so
    "a large red circle" and "red and blue circles" both state "red circle". Either part may
    list alternatives: "purple|violet circle|disc".
    """
    words = _words(prediction)
    facts = [ref.split(maxsplit=1) for ref in answers]
    found = 0
    for fact in facts:
        if len(fact) != 2:
            continue
        colours, shapes = (
            _mentions(words, _alternatives(fact[0])),
            _mentions(words, _alternatives(fact[1])),
        )
        found += any(0 < s - c <= 3 for c in colours for s in shapes)
    return found / len(facts) if facts else 0.0


def keyword_recall(prediction: str, answers: list[str]) -> float:
    """Fraction of references ("cup|coffee": any alternative will do) the answer mentions."""
    words = _words(prediction)
    found = sum(bool(_mentions(words, _alternatives(ref))) for ref in answers)
    return found / len(answers) if answers else 0.0


def _register(*metrics: Metric) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


METRICS: dict[str, Metric] = _register(
    Metric(
        name="exact_match",
        score=exact_match,
        pass_threshold=1.0,
        description="Normalised exact match (lowercase, trimmed, whitespace collapsed, trailing "
        "punctuation and quotes stripped), as TextVQA.",
    ),
    Metric(
        name="contains",
        score=contains,
        pass_threshold=1.0,
        description="OCRBench: any normalised reference occurs inside the normalised answer.",
    ),
    Metric(
        name="anls",
        score=anls,
        pass_threshold=0.8,
        description="DocVQA ANLS: 1 - normalised edit distance, 0 when the distance is 0.5 or "
        "more; passes at 0.8 so that misreading a fifth of the characters fails.",
    ),
    Metric(
        name="cer",
        score=cer,
        pass_threshold=0.9,
        description="1 - character error rate (jiwer), clipped to [0, 1]; character level, so it "
        "works for Chinese. Passes at 0.9.",
    ),
    Metric(
        name="token_f1",
        score=token_f1,
        pass_threshold=0.9,
        description="CC-OCR token F1: words for Latin scripts, characters for Chinese, punctuation "
        "dropped. Passes at 0.9.",
    ),
    Metric(
        name="relaxed_accuracy",
        score=relaxed_accuracy,
        pass_threshold=1.0,
        description="ChartQA: numbers within 5% after stripping currency and thousand separators, "
        "otherwise normalised exact match.",
    ),
    Metric(
        name="numeric_exact",
        score=numeric_exact,
        pass_threshold=1.0,
        description="Receipts: numbers equal after stripping currency and thousand separators; "
        "other answers (dates, phone numbers) equal after dropping separators.",
    ),
    Metric(
        name="fact_recall",
        score=fact_recall,
        pass_threshold=0.5,
        description="Captions: fraction of reference 'colour shape' facts the caption states. "
        "Passes when at least half are stated.",
    ),
    Metric(
        name="keyword_recall",
        score=keyword_recall,
        pass_threshold=0.5,
        description="Fraction of references ('a|b' alternatives) mentioned as words. Passes "
        "when at least half are mentioned.",
    ),
)


def get_metric(name: str) -> Metric:
    """The registered metric called `name`.

    Raises:
        EvalsetError: no metric has that name; the message suggests the closest names.
    """
    try:
        return METRICS[name]
    except KeyError:
        raise EvalsetError(unknown_metric_message(name)) from None


def unknown_metric_message(name: str) -> str:
    close = difflib.get_close_matches(name, METRICS, n=2, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown metric {name!r}; {hint}available: {', '.join(sorted(METRICS))}"
