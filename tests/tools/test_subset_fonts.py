"""The shipped fonts (evalsets/fonts/): they hold every character a generator prints, render as
the full files do, travel with their licences under names their licences allow, and stay
small enough to travel with the repository."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest
from fontTools.ttLib import TTFont

from tools import synth
from tools.synth import base
from tools.synth.subset_fonts import SOURCES, characters, rendering_differences

FONT_DIR = base.FONT_DIR
SYSTEM_DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
RESERVED = ("Liberation", "Arimo", "Tinos", "Cousine", "Bitstream", "Vera", "Arev")


def covered(name: str) -> set[str]:
    return {chr(code) for code in TTFont(base.font_path(name))["cmap"].getBestCmap()}


def printed(item: synth.SynthItem) -> str:
    """Every text an item's image shows, as far as its record tells."""
    meta = item.meta
    texts = [*item.answers, *meta.get("lines", []), *map(str, meta.get("fields", {}).values())]
    texts += [*meta.get("fields", {}), *meta.get("values", {}), *meta.get("values", {}).values()]
    return "".join(texts)


def test_every_character_a_generator_prints_is_in_the_font_it_prints_with() -> None:
    missing = []
    for seed in range(12):
        rng = random.Random(f"fonts/{seed}")
        for item in (
            synth.text_line(rng),
            synth.document(rng, question=rng.choice(("transcribe", "field"))),
            synth.receipt(rng),
            synth.chinese_line(rng, mixed=seed % 2 == 0),
        ):
            font = "cjk" if item.category == "chinese" else item.meta.get("font", "dejavu-mono")
            if item.category == "receipt":  # a mono font; both hold the same characters
                font = "liberation-mono"
            missing += [(font, c) for c in printed(item) if c != "\n" and c not in covered(font)]
    assert missing == []


def test_the_fonts_hold_the_derived_characters() -> None:
    chars = set(characters())
    assert set(string.ascii_letters + string.digits + string.punctuation + " ") <= chars
    assert {"订", "单", "号", "元"} <= chars  # from vocab.py's Chinese words and templates
    assert chars <= covered("cjk")  # the Chinese lines mix in codes, numbers and dates
    for name in base.LATIN_FONT_FILES:
        assert {c for c in chars if c.isascii()} <= covered(name)


def test_the_fonts_are_small_and_travel_with_their_licences() -> None:
    shipped = sorted(FONT_DIR.glob("*.ttf"))
    assert {p.name for p in shipped} == {spec.shipped for spec in SOURCES.values()}
    assert sum(p.stat().st_size for p in shipped) < 512 * 1024
    for licence in ("LICENSE-DejaVu.txt", "LICENSE-OFL-1.1.txt", "LICENSE-Apache-2.0.txt"):
        assert (FONT_DIR / licence).stat().st_size > 4000
    for path in shipped:
        names = TTFont(path)["name"]
        # The notices stay (copyright, licence); a modified font's own names carry no reserved
        # name (OFL condition 3, the Vera and Arev rename rules).
        assert names.getDebugName(0) and names.getDebugName(13)
        for name_id in (1, 3, 4, 6, 16):
            text = names.getDebugName(name_id) or ""
            assert not any(word in text for word in RESERVED), (path.name, name_id, text)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["dejavu-sans", "dejavu-serif", "dejavu-mono"])
def test_a_subset_renders_as_the_system_font_it_came_from(key: str) -> None:
    """Where this machine has Debian's DejaVu 2.37 (the other sources are not installed
    here), every kept character and vocabulary word renders pixel for pixel alike."""
    source = SYSTEM_DEJAVU / Path(SOURCES[key].path).name
    if not source.is_file() or "2.37" not in (TTFont(source)["name"].getDebugName(5) or ""):
        pytest.skip(f"Debian's DejaVu 2.37 is not installed ({source})")
    assert rendering_differences(source, FONT_DIR / SOURCES[key].shipped, characters()) == []
    other = "dejavu-mono" if key != "dejavu-mono" else "dejavu-sans"  # the check can fail
    assert rendering_differences(source, FONT_DIR / SOURCES[other].shipped, "Ag")
