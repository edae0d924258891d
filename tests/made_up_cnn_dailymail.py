"""A made-up CNN/DailyMail eval file of the real size and shape, for the full-length pipeline test.

The checker's GPT-J GEN_LEN is a sum over the whole data set (at least 90 % of the 4,016,878 characters the
reference model generated over the 13,368 samples), so no subset can pass it. With the oracle backend the generated
text is the reference summary, so a pipeline test reaches GEN_LEN only when its references are as long as real
summaries. These records are random English words with the real set's shape:

- 13,368 records ``{instruction, input, output}`` (``code.llm.cnn_dailymail.make_record``);
- articles whose GPT-J prompts have the lengths ``code.gptj.dataset`` estimates for the real set: article tokens
  drawn from LogNormal(median 800, sigma 0.45), so prompts average ~900 tokens and ~3 % reach the 1,919-token cap;
- highlights in the data set's style (3-5 sentences, each ending `` .``, one per line) of 35-110 GPT-J tokens:
  what the reference could generate (at least 30 new tokens, at most 128), ~300 characters each on average, as the
  reference's own 4,016,878 / 13,368 = 300.5.

It is test data, not a data set: the text means nothing, and a score on it is a pipeline check, not a result.
Deterministic in its seed, and written only where the caller says (the test's private build folder).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from code.llm.cnn_dailymail import CNN_DAILYMAIL_VALIDATION_SAMPLES, make_record

_WORDS = """the a of to and in that is was for on with as by at from his her their its it he she they we said says
police officials government minister president city country year years week month day people family children school
team game match season club fans players coach court judge lawyer case trial report study researchers scientists
doctors hospital patients health water fire storm weather flood road car driver train plane airport flight company
market price prices money bank business workers jobs plan plans law vote election party leader leaders state states
world nation news time home house street town village area region north south east west new old first last second
two three four five six ten hundred thousand million more most many some other after before during while since about
into over under between against without through around because but not also only still even just now then there
here when where who which what how would could should will can may must has have had been being were are be do did
does made make takes took found told asked called went came left began ended won lost saw gave got kept held moved
opened closed built bought sold paid earned raised cut local national public private small large long short early
late high low little big good best better major several former official recent key""".split()
ARTICLE_TOKENS_MEDIAN = 800.0
ARTICLE_TOKENS_SIGMA = 0.45
ARTICLE_TOKENS_RANGE = (30.0, 2400.0)
TOKENS_PER_WORD = 1.12  # GPT-2 tokens per word of this vocabulary with its numbers and commas, measured
HIGHLIGHT_SENTENCES = {3: 35, 4: 45, 5: 20}  # sentence count -> weight: 3.85 on average, like the real set
HIGHLIGHT_WORDS = (10, 16)  # words per highlight sentence


def _sentence(rng: random.Random, words: int) -> str:
    chosen = [rng.choice(_WORDS) for _ in range(words)]
    if words > 8 and rng.random() < 0.5:
        chosen[rng.randrange(3, words - 2)] += ","
    if rng.random() < 0.3:
        chosen.insert(rng.randrange(1, len(chosen)), str(rng.randrange(2, 2000)))
    return " ".join(chosen).capitalize()


def _article(rng: random.Random) -> str:
    """Paragraphs of 2-4 sentences until the drawn token count is reached."""
    target = min(max(rng.lognormvariate(math.log(ARTICLE_TOKENS_MEDIAN), ARTICLE_TOKENS_SIGMA),
                     ARTICLE_TOKENS_RANGE[0]), ARTICLE_TOKENS_RANGE[1])
    paragraphs: list[str] = []
    paragraph: list[str] = []
    tokens = 0.0
    while tokens < target:
        words = rng.randint(12, 30)
        paragraph.append(_sentence(rng, words) + ".")
        tokens += words * TOKENS_PER_WORD + 1
        if len(paragraph) >= rng.randint(2, 4):
            paragraphs.append(" ".join(paragraph))
            paragraph = []
    if paragraph:
        paragraphs.append(" ".join(paragraph))
    return "\n\n".join(paragraphs)


def _highlights(rng: random.Random) -> str:
    """CNN/DailyMail's highlight style: one sentence per line, each ending in `` .``."""
    (count,) = rng.choices(list(HIGHLIGHT_SENTENCES), weights=list(HIGHLIGHT_SENTENCES.values()))
    return "\n".join(_sentence(rng, rng.randint(*HIGHLIGHT_WORDS)) + " ." for _ in range(count))


def made_up_records(count: int = CNN_DAILYMAIL_VALIDATION_SAMPLES, seed: int = 0) -> list[dict]:
    """``count`` records of the shape the module docstring gives; the first n are the same for every count >= n."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        article = _article(rng)
        records.append(make_record(article, _highlights(rng)))
    return records


def write_made_up_eval_json(path: Path, count: int = CNN_DAILYMAIL_VALIDATION_SAMPLES, seed: int = 0) -> Path:
    """Write the records as a ``cnn_eval.json`` (the reference's format) at ``path``; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(made_up_records(count, seed), ensure_ascii=False), encoding="utf-8")
    return path
