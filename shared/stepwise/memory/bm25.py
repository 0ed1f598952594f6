"""Okapi BM25 over one user's memories, written here rather than imported: the well-kept libraries
(rank_bm25, bm25s) need numpy (and bm25s scipy), tens of MB that no Stepwise layer ships, to score at
most MAX_PER_USER short texts, which pure Python does in a few milliseconds (bench/memory_search.py).

Terms are Unicode words (`\\w+`) of the NFKC-normalized, case-folded text: no stemming and no stop
words, so scoring stays language-neutral and IDF discounts the common words. IDF is Lucene's
non-negative form, so a term in most memories still counts a little instead of counting against.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

K1 = 1.2
B = 0.75
_WORD = re.compile(r"\w+")


def terms(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


class Index:
    """Term statistics of a fixed set of documents, built once and scored many times."""

    def __init__(self, documents: Sequence[str]) -> None:
        self._frequencies = [Counter(terms(d)) for d in documents]
        self._lengths = [sum(f.values()) for f in self._frequencies]
        self._average = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        containing: Counter[str] = Counter()
        for frequencies in self._frequencies:
            containing.update(frequencies.keys())
        n = len(documents)
        self._idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t, df in containing.items()}

    def scores(self, query: str) -> list[float]:
        """One score per document, in the documents' order (0 for a document sharing no term)."""
        wanted = [t for t in dict.fromkeys(terms(query)) if t in self._idf]
        out = []
        for frequencies, length in zip(self._frequencies, self._lengths, strict=True):
            norm = K1 * (1 - B + B * length / self._average) if self._average else K1
            score = 0.0
            for term in wanted:
                tf = frequencies.get(term, 0)
                if tf:
                    score += self._idf[term] * tf * (K1 + 1) / (tf + norm)
            out.append(score)
        return out
