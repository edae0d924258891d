"""Sentence splitting for ROUGE-Lsum: nltk's punkt when its data is installed, else our own offline rules.

The MLPerf GPT-J reference puts each sentence of a prediction and of a reference on its own line
(`"\\n".join(nltk.sent_tokenize(text))`) because rougeLsum scores sentence by sentence. punkt needs the `punkt_tab`
data package, which cannot be downloaded on every machine, so `split_sentences` falls back to `regex_split_sentences`
and `splitter_name()` says which one ran; accuracy.txt records it.

What the choice changes: ROUGE-1/2/L do not depend on it at all (rouge_score's tokenizer turns every
non-alphanumeric character, newlines included, into a separator), rougeLsum does (it is reported, not checked), and
gen_len only where the whitespace between two sentences is not a single character (it becomes one newline).

The fallback's rules, in order, for a candidate boundary: one or more of `. ! ? …`, then any closing quotes or
brackets, then whitespace, then a character that can open a sentence (an upper-case letter, a digit, or an opening
quote or bracket). A candidate is a boundary unless the word ending in a single `.` is
- a single letter (an initial: "J. K. Rowling", "George W. Bush");
- a title or a word that never ends a sentence ("Mr.", "Dr.", "Sen.", "Gov.", "St.", "vs.", "e.g.", ...);
- "No." / "Nos." / "Vol." / "p." / "pp." / "Art." / "Fig." or a month ("Jan.", "Sept.", ...) before a digit;
- an abbreviation that may end a sentence ("U.S.", "a.m.", "Inc.", "Ltd.", "Jr.", "etc.", "Calif.", dotted
  forms such as "Ph.D.") and the next word is not a common sentence opener ("The", "He", "But", ...):
  "the U.S. Army" stays together, "moved to the U.S. The move" is split.
Decimals ("2.5") and dotted names ("CNN.com") have no whitespace after the inner period, so they never split; a
period after a number ("he scored 25. The team") does. Text with no terminator, newlines included, is one sentence.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

NLTK_PUNKT = "nltk-punkt"
REGEX_FALLBACK = "regex-fallback"

_BOUNDARY = re.compile(r"([.!?\u2026]+)([\"'\u201d\u2019)\]]*)(\s+)")
"""Terminators, closing quotes/brackets, whitespace: a candidate sentence boundary."""
_OPENERS = "\"'\u201c\u2018(["
_LEADING_PUNCT = "\"'\u201c\u2018([{"

_NEVER_FINAL = frozenset(
    # Titles and words that precede what they abbreviate; e.g./i.e./cf./vs./v. are followed by more of the sentence.
    "mr mrs ms messrs mme mlle dr prof rev hon fr sen rep reps gov lt col gen maj capt cmdr adm sgt cpl pvt supt "
    "insp det pres vs v cf e.g i.e viz".split()
)
_BEFORE_NUMBER = frozenset("no nos vol vols p pp art fig figs ch sec".split())
_MONTHS = frozenset("jan feb mar apr jun jul aug sep sept oct nov dec".split())
_MAY_END = frozenset(
    # Abbreviations that also end sentences ("... for Smith & Co. The firm ...").
    "inc ltd co corp llc plc bros jr sr etc esq st mt ft ave blvd rd dept univ assn est approx "
    "ala ariz ark calif colo conn del fla ga ill ind kan ky la md mass mich minn miss mo mont neb nev okla ore pa "
    "tenn tex va vt wash wis wyo".split()
)
_SENTENCE_OPENERS = frozenset(
    # Words that start sentences far more often than they follow an abbreviation inside one.
    "the a an he she it they we i you his her its their our this that these those there here but and so yet if "
    "when while after before as in on at for however meanwhile now then also police officials".split()
)
_DOTTED_ABBREVIATION = re.compile(r"^(?:[a-z]{1,2}\.)+[a-z]{1,2}$")
"""Lower-cased word before the final period: u.s, u.k, a.m, p.m, d.c, ph.d, u.s.s.r."""


@functools.cache
def _punkt() -> Callable[[str], list[str]] | None:
    """nltk.sent_tokenize if nltk and its punkt data load, else None."""
    try:
        import nltk

        nltk.sent_tokenize("Probe one. Probe two.")
    except (ImportError, LookupError):
        return None
    return nltk.sent_tokenize


def splitter_name() -> str:
    """Which splitter `split_sentences` uses on this machine: NLTK_PUNKT or REGEX_FALLBACK."""
    return NLTK_PUNKT if _punkt() is not None else REGEX_FALLBACK


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` (nltk punkt when available, else `regex_split_sentences`)."""
    punkt = _punkt()
    return punkt(text) if punkt is not None else regex_split_sentences(text)


def _word_before(text: str, end: int) -> str:
    """The whitespace-delimited word ending at `end`, lower-cased, without leading quotes or brackets."""
    start = end
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:end].lstrip(_LEADING_PUNCT).lower()


def _next_word(text: str, start: int) -> str:
    match = re.match(r"[^\W_]+", text[start:].lstrip(_OPENERS))
    return match.group(0).lower() if match else ""


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    following = text[match.end()] if match.end() < len(text) else ""
    if not following or not (following.isupper() or following.isdigit() or following in _OPENERS):
        return False
    if match.group(1) != ".":
        return True  # ! ? ... and combinations are not abbreviations
    word = _word_before(text, match.start(1))
    if len(word) == 1 and word.isalpha():
        return False  # an initial
    if word in _NEVER_FINAL:
        return False
    if following.isdigit() and (word in _BEFORE_NUMBER or word in _MONTHS):
        return False
    if word in _MAY_END or word in _MONTHS or _DOTTED_ABBREVIATION.match(word):
        return _next_word(text, match.end()) in _SENTENCE_OPENERS
    return True


def regex_split_sentences(text: str) -> list[str]:
    """Split `text` into sentences with the rules in this module's docstring.

    Whitespace between sentences is dropped and each sentence is stripped, as punkt does; empty text gives [].
    """
    sentences = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if _is_boundary(text, match):
            sentences.append(text[start : match.start(3)])
            start = match.end()
    sentences.append(text[start:])
    return [s.strip() for s in sentences if s.strip()]


def newline_sentences(text: str) -> str:
    """`text` stripped, one sentence per line: the reference's post-processing for rougeLsum."""
    return "\n".join(split_sentences(text.strip()))
