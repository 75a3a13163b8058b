"""The reference's later answers stored on the study (autotune.records.reference): each
extension reads whole or is left out with one line naming its key and field."""

from __future__ import annotations

from autotune.records.reference import PREFIX, ReferenceExtension, extensions


def _extension(stage: int, ids: list[str]) -> ReferenceExtension:
    return ReferenceExtension(
        stage=stage,
        answered_items=10 * stage,
        predictions={i: "A" for i in ids},
        item_scores=dict.fromkeys(ids, 1.0),
        item_passed=dict.fromkeys(ids, True),
        computed=len(ids),
        for_trial=3,
        started="2026-12-07T04:00:00+00:00",
        seconds=1.5,
        batch_size=32,
    )


def test_extensions_read_by_stage_and_a_damaged_one_is_named() -> None:
    later, first = _extension(3, ["c", "d"]), _extension(2, ["a", "b"])
    damaged = first.model_dump() | {"item_scores": {"a": 1.5, "b": 0.0}}  # not a share
    attrs = {
        later.key(): later.model_dump(),
        first.key(): first.model_dump(),
        f"{PREFIX}forged": damaged,
        "space": {"name": "default"},  # the study's other attributes are not extensions
    }
    found, problems = extensions(attrs)
    assert found == [first, later]
    assert len(problems) == 1 and problems[0].startswith(f"{PREFIX}forged: item_scores.a")
    # Two processes adding the same items write the same key.
    assert _extension(2, ["b", "a"]).key() == first.key() != later.key()
