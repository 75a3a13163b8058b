"""Write the fonts the generators draw with (evalsets/fonts/): subsets of Debian's font files.

Usage (from the repository root, once the character set or a source font changes)::

    apt-get download fonts-dejavu-core fonts-liberation2 fonts-wqy-microhei
    for f in fonts-*.deb; do dpkg -x "$f" debs; done
    python -m tools.synth.subset_fonts debs/usr/share/fonts/truetype

A pool is built on machines with no system fonts and no network (the GPU image), so the fonts
travel with the repository, cut down by fontTools to the characters the generators can print
(`characters()`, read from their own source). Hinting, kerning and every layout feature are
kept and no outline is touched, so a glyph renders exactly as from the full file: `main`
renders every kept character and every word of the vocabulary with both files and refuses to
write a subset that differs by one pixel. Liberation's licence (OFL 1.1) reserves its names for
unmodified fonts, so its subsets are renamed "Evalset"; DejaVu's and WenQuanYi's keep theirs.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import string
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTFont
from PIL import Image, ImageChops, ImageDraw, ImageFont, features

from tools.synth import base, vocab

SYNTH_DIR = Path(__file__).resolve().parent
# Sizes the generators print at (10-80 px), and a margin either side.
CHECK_SIZES = (*range(6, 33), 36, 40, 48, 56, 64, 72, 80, 96)


@dataclass(frozen=True)
class Source:
    """Where a shipped font comes from: a file of a Debian font package, and its new name."""

    path: str  # under the packages' usr/share/fonts/truetype
    shipped: str  # file name in evalsets/fonts/
    rename: tuple[str, str] | None = None  # (reserved name, replacement) in the name table


SOURCES = {
    "dejavu-sans": Source("dejavu/DejaVuSans.ttf", base.LATIN_FONT_FILES["dejavu-sans"]),
    "dejavu-serif": Source("dejavu/DejaVuSerif.ttf", base.LATIN_FONT_FILES["dejavu-serif"]),
    "dejavu-mono": Source("dejavu/DejaVuSansMono.ttf", base.LATIN_FONT_FILES["dejavu-mono"]),
    **{
        key: Source(
            f"liberation2/Liberation{kind}-Regular.ttf",
            base.LATIN_FONT_FILES[key],
            ("Liberation", "Evalset"),
        )
        for key, kind in (
            ("liberation-sans", "Sans"),
            ("liberation-serif", "Serif"),
            ("liberation-mono", "Mono"),
        )
    },
    "cjk": Source("wqy/wqy-microhei.ttc", base.CJK_FONT.name),
}
# The name records that present a font's name to users (family, unique id, full name,
# PostScript name, typographic family and subfamily, WWS family): the OFL's "primary font name".
NAME_IDS = (1, 3, 4, 6, 16, 17, 21)


def _literals(path: Path) -> list[str]:
    """Every string constant of a module but its docstrings (never drawn)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def characters() -> str:
    """Every character a generator can print, sorted: printable ASCII (the digits of any
    number, the punctuation of any format) and every character of a string written in the
    generators' source (the vocabulary, the templates, the Chinese words)."""
    chars = set(string.printable) - set(string.whitespace) | {" "}
    for module in sorted(SYNTH_DIR.glob("*.py")):
        if module.name != Path(__file__).name:
            chars.update(*_literals(module))
    return "".join(sorted(c for c in chars if c.isprintable()))


def subset_font(source: Path, target: Path, spec: Source, chars: str) -> None:
    """`source` cut down to `chars`, with everything that decides how a glyph renders."""
    options = subset.Options(
        hinting=True,
        legacy_kern=True,  # Pillow's basic layout kerns from 'kern', raqm's from GPOS
        layout_features=["*"],
        name_IDs=["*"],  # the copyright and licence records travel with the font
        name_languages=["*"],
        name_legacy=True,
        notdef_outline=True,
        glyph_names=True,
        prune_unicode_ranges=False,
        font_number=0,
    )
    options.drop_tables.append("FFTM")  # FontForge's timestamps: nothing renders from them
    font = subset.load_font(str(source), options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=chars)
    subsetter.subset(font)
    if spec.rename is not None:
        reserved, replacement = spec.rename
        for record in font["name"].names:
            if record.nameID in NAME_IDS:
                record.string = record.toUnicode().replace(reserved, replacement)
    subset.save_font(font, str(target), options)


def _words(chars: str) -> list[str]:
    words = [*vocab.WORDS, *vocab.CHINESE_WORDS, *vocab.DOCUMENT_TITLES, *vocab.STORES]
    return [chars, *words, *vocab.GROCERIES, *vocab.CHART_TITLES]


def rendering_differences(full: Path, small: Path, chars: str) -> list[str]:
    """Where `small` renders unlike `full`: each kept character alone and every vocabulary
    word (kerning, ligatures), at every size in CHECK_SIZES, with Pillow as the generators
    draw."""
    covered = set(TTFont(str(small), fontNumber=0)["cmap"].getBestCmap())
    texts = [c for c in chars if ord(c) in covered]
    texts += [w for w in _words(chars) if all(ord(c) in covered for c in w)]
    differences = []
    layouts = [ImageFont.Layout.BASIC]
    if features.check("raqm"):  # what the generators use where Pillow has it
        layouts.append(ImageFont.Layout.RAQM)
    for px, layout in itertools.product(CHECK_SIZES, layouts):
        faces = [ImageFont.truetype(str(path), px, layout_engine=layout) for path in (full, small)]
        for text in texts:
            images = []
            for face in faces:
                left, top, right, bottom = face.getbbox(text)
                image = Image.new("L", (right - left + 2 * px, bottom - top + 2 * px), 255)
                ImageDraw.Draw(image).text((px - left, px - top), text, font=face, fill=0)
                images.append(image)
            if images[0].size != images[1].size or ImageChops.difference(*images).getbbox():
                differences.append(f"{small.name}: {text[:20]!r} at {px} px ({layout.name})")
    return differences


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="the packages' usr/share/fonts/truetype")
    parser.add_argument("--out", type=Path, default=base.FONT_DIR)
    args = parser.parse_args(argv)
    chars = characters()
    args.out.mkdir(parents=True, exist_ok=True)
    for key, spec in SOURCES.items():
        source = args.source / spec.path
        if not source.is_file():
            print(f"subset_fonts: {key}: {source} not found", file=sys.stderr)
            return 1
        target = args.out / spec.shipped
        subset_font(source, target, spec, chars)
        differences = rendering_differences(source, target, chars)
        if differences:
            target.unlink()
            print(
                f"subset_fonts: {key}: the subset renders unlike {source} "
                f"({len(differences)} cases, first {differences[0]})",
                file=sys.stderr,
            )
            return 1
        print(f"{target}: {target.stat().st_size:,} bytes, renders as {source.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
