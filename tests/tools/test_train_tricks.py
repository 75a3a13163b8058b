"""What makes the reader trainable on 2 CPU cores changes nothing the checkpoint computes.

`tools/train_test_model.py` computes its loss over the token ids the data uses, runs the patch
embedding as a matrix product and trains a glyph probe on the vision tokens (issue 28). The
first two must be exact rewrites, and the probe's targets must sit where the glyphs are.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tools import make_test_model as base
from tools.train_data import PROBE_CLASSES, READER_GEOMETRY, glyph_cells, training_example
from tools.train_test_model import ARCH, TrainedVocabulary, linear_patch_embedding


@pytest.fixture(scope="module")
def model_and_vocabulary() -> tuple[torch.nn.Module, TrainedVocabulary]:
    torch.manual_seed(0)
    config = base.build_config(**ARCH)
    model = base.build_model(config, seed=0, silence_tokens=False)
    text = config.text_config
    vocabulary = TrainedVocabulary(base.build_tokenizer(), text.vocab_size, text.hidden_size)
    with torch.no_grad():
        vocabulary.rest.normal_(0, 0.5)  # a trained, non-zero shared row
    vocabulary.write_rest(model)
    return model, vocabulary


def test_the_vocabulary_loss_is_the_full_softmax_loss(
    model_and_vocabulary: tuple[torch.nn.Module, TrainedVocabulary],
) -> None:
    model, vocabulary = model_and_vocabulary
    hidden = torch.randn(7, ARCH["text_hidden_size"]) * 3
    labels = vocabulary.ids[torch.tensor([0, 5, 17, 40, 60, 100, len(vocabulary.ids) - 1])]
    with torch.no_grad():
        full = F.cross_entropy(model.lm_head(hidden), labels)
        ours = F.cross_entropy(vocabulary.logits(model, hidden), vocabulary.position[labels])
    assert torch.allclose(full, ours, rtol=1e-5), (full, ours)
    # The rows it does not compute all hold the shared vector, so they score alike.
    weight = model.get_input_embeddings().weight
    unused = torch.ones(weight.shape[0], dtype=torch.bool)
    unused[vocabulary.ids] = False
    assert torch.equal(weight[unused][:3], vocabulary.rest.detach().expand(3, -1))


def test_training_data_stays_inside_the_vocabulary(
    model_and_vocabulary: tuple[torch.nn.Module, TrainedVocabulary],
) -> None:
    _, vocabulary = model_and_vocabulary
    tokenizer = base.build_tokenizer()
    for index in range(40):
        example = training_example(0, index)
        ids = tokenizer(example.prompt + example.answer + "<|im_end|>")["input_ids"]
        vocabulary.check(torch.tensor(ids))
    with pytest.raises(RuntimeError, match="outside the trained vocabulary"):
        vocabulary.check(torch.tensor(tokenizer("中")["input_ids"]))


def test_the_linear_patch_embedding_equals_the_convolution(
    model_and_vocabulary: tuple[torch.nn.Module, TrainedVocabulary],
) -> None:
    model, _ = model_and_vocabulary
    embed = model.model.visual.patch_embed
    pixels = torch.randn(11, 3 * 2 * 16 * 16)
    with torch.no_grad():
        stock = embed(pixels)
        linear_patch_embedding(model)
        ours = embed(pixels)
    del embed.forward  # back to the module's own forward for the other tests
    assert torch.allclose(stock, ours, atol=1e-5)


def test_probe_cells_mark_the_tokens_that_hold_ink() -> None:
    """At full size each object fills its 64 px cell, 2 x 2 vision tokens: every slot of those
    four tokens names it, the tokens hold ink, and no token outside an object's cell does; a
    code's labels spell its answer, cell by cell, a strip's name its objects."""
    blank = len(PROBE_CLASSES) - 1
    seen = set()
    for index in range(60):
        example = training_example(0, index)
        if example.max_side is not None:  # shrunk: glyphs share tokens (tested below)
            continue
        pixels = np.asarray(example.image.convert("RGB"), dtype=np.float32)
        background = pixels[0, 0]
        token_px = READER_GEOMETRY.factor
        columns = example.image.width // token_px
        for token, slots in enumerate(example.cells):
            assert slots[0] == slots[1]  # a whole token lies inside one object's cell or none
            row, column = divmod(token, columns)
            block = pixels[
                row * token_px : (row + 1) * token_px, column * token_px : (column + 1) * token_px
            ]
            marked = bool((np.abs(block - background) > 80).any())
            if slots[0] != blank:
                assert marked, (index, token, PROBE_CLASSES[slots[0]])
        # One label per 64 px cell, read along the top row of tokens, two tokens a cell.
        per_cell = [example.cells[2 * k][0] for k in range(columns // 2)]
        assert per_cell == [example.cells[2 * k + 1][0] for k in range(columns // 2)]
        assert per_cell == [example.cells[columns + 2 * k][0] for k in range(columns // 2)]
        named = [PROBE_CLASSES[c] for c in per_cell if c != blank]
        if example.prompt.startswith("Read the text"):
            assert example.cells == glyph_cells(example.answer, example.image)
            assert "".join(named) == example.answer
            seen.add("code")
        else:
            assert all(" " in name for name in named)  # "colour shape"
            if example.prompt.startswith("How many"):
                assert str(len(named)) == example.answer
            seen.add("shapes")
    assert seen == {"code", "shapes"}
