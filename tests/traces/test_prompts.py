"""Prompt materialisation: exact counts per strategy, shared prefixes byte-identical, speed."""

from __future__ import annotations

import base64
import dataclasses
import io
import time

import pytest

from traces.errors import PromptError
from traces.prompts.maker import (
    CalibrationSample,
    CallableTokenCounter,
    HFTokenCounter,
    PromptMaker,
    fit_calibration,
    tokens_per_word,
)
from traces.records import ImageSpec, TraceRequest, trace_requests_from_table
from traces.synth.sessions import SessionSpec
from traces.synth.trace import PrefixSpec, SynthConfig, synthesize


def _req(
    n: int,
    blocks: tuple[int, ...] | None = None,
    *,
    rid: str = "r1",
    api: str = "chat",
    **kw: object,
) -> TraceRequest:
    return TraceRequest(
        index=0,
        request_id=rid,
        arrival_s=0.0,
        api=api,
        input_tokens=n,
        output_tokens=1,
        prefix_blocks=blocks,
        **kw,  # type: ignore[arg-type]
    )


def _n_words(text: str | None) -> int:
    assert text is not None
    return len(text.split())


# ------------------------------------------------------------------ words
@pytest.mark.parametrize("n", [1, 7, 511, 512, 513, 1500, 4096])
def test_words_count_is_exact(n: int) -> None:
    maker = PromptMaker()
    assert _n_words(maker.make(_req(n, (1, 2, 3, 4, 5, 6, 7, 8))).text) == n
    assert _n_words(maker.make(_req(n, None)).text) == n


def test_shared_blocks_give_byte_identical_prefixes() -> None:
    maker = PromptMaker(block_size=64)
    a = maker.make(_req(300, (10, 11, 12, 20, 21), rid="a")).text
    b = maker.make(_req(200, (10, 11, 12, 30), rid="b")).text
    fresh = PromptMaker(block_size=64).make(_req(300, (10, 11, 12, 20, 21), rid="a")).text
    assert a is not None
    assert b is not None
    shared = " ".join(a.split()[: 3 * 64])
    assert b.startswith(shared + " ")
    assert a[len(shared) :] != b[len(shared) :]
    assert fresh == a  # a new maker (another process) builds the same bytes


def test_partial_last_block_is_a_prefix_of_the_full_block() -> None:
    maker = PromptMaker(block_size=100)
    turn1 = maker.make(_req(150, (1, 2), rid="t1")).text
    turn2 = maker.make(_req(260, (1, 2, 3), rid="t2")).text
    assert turn1 is not None
    assert turn2 is not None
    assert turn2.startswith(turn1 + " ")


def test_synthesized_sessions_resend_the_previous_turn_verbatim() -> None:
    table = synthesize(
        SynthConfig(
            requests=200,
            seed=4,
            sessions=SessionSpec(turns_mean=3.0, think_mean_s=1.0),
            prefix=PrefixSpec(groups=2, tokens=600),
        )
    ).table
    maker = PromptMaker()
    texts: dict[tuple[str, int], str] = {}
    for req in trace_requests_from_table(table):
        text = maker.make(req).text
        assert text is not None
        assert _n_words(text) == req.input_tokens
        assert req.session_id is not None
        assert req.turn is not None
        prev = texts.get((req.session_id, req.turn - 1))
        if prev is not None:
            assert text.startswith(prev + " ")
        texts[(req.session_id, req.turn)] = text
    assert any(turn > 1 for _, turn in texts)


def test_extra_blocks_are_ignored_and_missing_blocks_filled() -> None:
    maker = PromptMaker(block_size=10)
    assert _n_words(maker.make(_req(15, (1, 2, 3, 4))).text) == 15
    assert _n_words(maker.make(_req(35, (1,))).text) == 35


def test_template_tokens_are_taken_from_chat_prompts_only() -> None:
    maker = PromptMaker(template_tokens=12)
    assert _n_words(maker.make(_req(100, api="chat")).text) == 88
    assert _n_words(maker.make(_req(100, api="completions")).text) == 100
    assert _n_words(maker.make(_req(5, api="chat")).text) == 1


def test_literal_prompt_and_messages_pass_through() -> None:
    maker = PromptMaker()
    assert maker.make(_req(5, prompt="hello")).text == "hello"
    made = maker.make(_req(5, messages='[{"role":"user","content":"x"}]'))
    assert made.messages_json == '[{"role":"user","content":"x"}]'
    assert made.text is None


def test_one_million_token_prompt_is_fast_and_cache_bounded() -> None:
    maker = PromptMaker(cache_tokens=1 << 20)
    req = _req(1_000_000, tuple(range(2000)))
    start = time.perf_counter()
    text = maker.make(req).text
    elapsed = time.perf_counter() - start
    assert _n_words(text) == 1_000_000
    assert elapsed < 2.0
    maker.make(_req(600_000, tuple(range(5000, 6200))))
    assert len(maker._blocks) <= (1 << 20) // 512


def test_maker_rejects_bad_options() -> None:
    for kw in (
        {"block_size": 0},
        {"tokens_per_word": 0.0},
        {"template_tokens": -1},
        {"image_format": "gif"},
    ):
        with pytest.raises(ValueError):  # noqa: PT011
            PromptMaker(**kw)


# ------------------------------------------------------------------ calibrated
def test_fit_calibration_recovers_ratio_and_overhead() -> None:
    samples = [CalibrationSample(words=w, prompt_tokens=round(1.3 * w + 9)) for w in (50, 200, 800)]
    fit = fit_calibration(samples)
    assert fit.tokens_per_word == pytest.approx(1.3, rel=0.01)
    assert fit.overhead_tokens == pytest.approx(9, abs=1)
    assert tokens_per_word([CalibrationSample(words=100, prompt_tokens=130)]) == pytest.approx(1.3)
    with pytest.raises(ValueError, match="samples"):
        fit_calibration([])


def test_calibrated_strategy_scales_words() -> None:
    maker = PromptMaker(tokens_per_word=1.25, block_size=100)
    text = maker.make(_req(1000, (1, 2, 3), api="completions")).text
    assert _n_words(text) == pytest.approx(800, abs=3)
    assert maker.strategy.name == "calibrated"
    again = maker.make(_req(500, (1, 2), api="completions", rid="b")).text
    assert again is not None
    assert text is not None
    assert text.startswith(" ".join(again.split()[:160]))


def test_strategy_describes_the_words_default() -> None:
    strategy = PromptMaker(block_size=256, seed=3).strategy
    assert strategy.name == "words"
    assert dataclasses.asdict(strategy)["block_size"] == 256
    assert strategy.tokenizer is None


# ------------------------------------------------------------------ counted strategies
def _tiny_tokenizers() -> list[object]:
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizer extra is not installed")
    models, pre, trainers, decoders = (
        tokenizers.models,
        tokenizers.pre_tokenizers,
        tokenizers.trainers,
        tokenizers.decoders,
    )
    corpus = [
        "the quick brown fox jumps over the lazy dog",
        "a journey of a thousand miles begins with a single step",
        "all that glitters is not gold, said the old man",
        "to be or not to be that is the question",
        "the early bird catches the worm; actions speak louder than words",
    ] * 40
    word = tokenizers.Tokenizer(models.WordLevel(unk_token="[UNK]"))
    word.pre_tokenizer = pre.Whitespace()
    word.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre.ByteLevel.alphabet())
    )
    return [word, bpe]


@pytest.mark.parametrize("kind", [0, 1], ids=["wordlevel", "bytelevel-bpe"])
def test_tokenizer_strategy_is_exact(kind: int) -> None:
    tok = _tiny_tokenizers()[kind]
    counter = HFTokenCounter(tok)
    maker = PromptMaker(block_size=32, seed=5, counter=counter, template_tokens=4)
    assert maker.strategy.name == "tokenizer"
    texts = {}
    for n, blocks, api in [
        (1, None, "completions"),
        (31, (1,), "completions"),
        (32, (1,), "completions"),
        (33, (1, 2), "chat"),
        (100, (1, 2, 3), "chat"),
        (250, (1, 2, 3, 4, 5), "completions"),
        (400, (9,), "chat"),
    ]:
        req = _req(n, blocks, api=api, rid=f"r{n}")
        text = maker.make(req).text
        assert text is not None
        assert counter.count(text) == maker.text_tokens(req)
        texts[n] = text
    assert texts[100].startswith(texts[32] + " ")


def test_tokenizer_from_file(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    tok = _tiny_tokenizers()[1]
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))  # type: ignore[attr-defined]
    counter = HFTokenCounter.from_file(path)
    assert counter.description.startswith("tokenizer.json sha256:")
    maker = PromptMaker(counter=counter)
    assert maker.strategy.tokenizer == counter.description
    text = maker.make(_req(777, (1, 2))).text
    assert text is not None
    assert counter.count(text) == 777
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PromptError, match=r"tokenizer\.json"):
        HFTokenCounter.from_file(tmp_path / "bad.json")


def test_tokenize_server_strategy_with_a_callable() -> None:
    calls: list[str] = []

    def tokenize(text: str) -> int:
        # A server that splits words longer than 6 letters in two.
        calls.append(text)
        return sum(2 if len(w) > 6 else 1 for w in text.split())

    counter = CallableTokenCounter(tokenize, description="http://x/tokenize")
    maker = PromptMaker(block_size=50, counter=counter)
    assert maker.strategy.name == "tokenize-server"
    assert all(len(w) <= 6 for w in counter.words().words)
    for n in (1, 49, 50, 51, 175):
        text = maker.make(_req(n, (1, 2, 3), api="completions")).text
        assert text is not None
        assert tokenize(text) == n


def test_counter_and_ratio_are_exclusive() -> None:
    counter = CallableTokenCounter(lambda t: len(t.split()))
    with pytest.raises(ValueError, match="exclusive"):
        PromptMaker(counter=counter, tokens_per_word=1.5)


def test_impossible_count_raises_prompt_error() -> None:
    # A tokenizer that adds a token once a text has 4 words: 4 tokens is unreachable.
    counter = CallableTokenCounter(lambda t: len(t.split()) + (len(t.split()) >= 4))
    maker = PromptMaker(block_size=8, counter=counter)
    with pytest.raises(PromptError, match="exactly 4"):
        maker.make(_req(4, None, api="completions"))
    with pytest.raises(PromptError, match="single token"):
        CallableTokenCounter(lambda t: 2 * len(t.split())).words()


# ------------------------------------------------------------------ images
def test_prompts_carry_images_of_the_exact_size() -> None:
    image = pytest.importorskip("PIL.Image", reason="the images extra is not installed")
    req = _req(10, images=(ImageSpec(width=64, height=48), ImageSpec(width=20, height=30)))
    made = PromptMaker(seed=1).make(req)
    assert len(made.images) == 2
    sizes = []
    for url in made.images:
        assert url.startswith("data:image/png;base64,")
        with image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as img:
            sizes.append(img.size)
    assert sizes == [(64, 48), (20, 30)]
    assert made.images[0] != made.images[1]
    assert PromptMaker(seed=1).make(req).images == made.images
    jpeg = PromptMaker(seed=1, image_format="jpeg").make(req)
    assert jpeg.images[0].startswith("data:image/jpeg;base64,")
    assert PromptMaker(with_images=False).make(req).images == ()
    assert PromptMaker().make(_req(10)).images == ()
