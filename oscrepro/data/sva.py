"""Synthetic subject-verb agreement (SVA) in the style of Linzen et al. (2016) — fqo paper Sec. 4.1.2, App. B.

Sentence template (one distractor noun inside a prepositional phrase, the verb masked):

    the [ADJ] SUBJECT PREP the [ADJ] DISTRACTOR <verb>          e.g.  "the keys on the old table <verb>"

The label is the subject's number (0 = singular "is", 1 = plural "are"); the model reads it out at the
``<verb>`` position, so the verb->subject and verb->distractor attention weights (Table 3) are the attention
row of the last token. Each adjective slot is filled with probability 1/2, so T is 6, 7 or 8 tokens (T = 7 is
the paper's "typical hard sentence", App. B).

- **Hard split**: the distractor's number differs from the subject's (the agreement-attractor case).
- **Number-invariant nouns** (fish, deer, sheep) have one form for both numbers. As subjects their number is
  drawn at random and is *not* recoverable from the sentence, which reproduces the paper's structural error mode
  (150 of 151 oscillator errors had fish/deer subjects). They make up 3 of the 48 subject/distractor nouns, so an
  ideal model still errs on ~1.5 % of sentences.
- **Determinism**: ``generate(n, seed)`` uses its own ``np.random.default_rng(seed)``; the data module draws the
  train/val/test splits from disjoint streams ``(seed, 0)``, ``(seed, 1)``, ``(seed, 2)`` (STYLE rule 9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# (singular, plural) noun pairs; invariant nouns have identical forms.
NOUNS: tuple[tuple[str, str], ...] = (
    ("key", "keys"), ("author", "authors"), ("dog", "dogs"), ("cat", "cats"), ("book", "books"),
    ("table", "tables"), ("car", "cars"), ("teacher", "teachers"), ("student", "students"), ("boy", "boys"),
    ("girl", "girls"), ("tree", "trees"), ("house", "houses"), ("friend", "friends"), ("doctor", "doctors"),
    ("bird", "birds"), ("picture", "pictures"), ("box", "boxes"), ("farmer", "farmers"), ("window", "windows"),
    ("chair", "chairs"), ("letter", "letters"), ("pilot", "pilots"), ("song", "songs"), ("lamp", "lamps"),
    ("road", "roads"), ("king", "kings"), ("queen", "queens"), ("horse", "horses"), ("phone", "phones"),
    ("river", "rivers"), ("lawyer", "lawyers"), ("painter", "painters"), ("garden", "gardens"), ("ship", "ships"),
    ("bottle", "bottles"), ("cloud", "clouds"), ("drawer", "drawers"), ("nurse", "nurses"), ("player", "players"),
    ("cup", "cups"), ("village", "villages"), ("child", "children"), ("man", "men"), ("woman", "women"),
    ("fish", "fish"), ("deer", "deer"), ("sheep", "sheep"),
)
INVARIANT: frozenset[str] = frozenset(s for s, p in NOUNS if s == p)
PREPOSITIONS: tuple[str, ...] = ("on", "near", "behind", "of", "with", "beside", "under", "above")
ADJECTIVES: tuple[str, ...] = ("old", "small", "red", "big", "new", "quiet")
SPECIALS: tuple[str, ...] = ("<pad>", "<verb>", "the")

VOCAB: tuple[str, ...] = SPECIALS + tuple(
    dict.fromkeys([w for pair in NOUNS for w in pair] + list(PREPOSITIONS) + list(ADJECTIVES))
)
WORD_TO_ID: dict[str, int] = {w: i for i, w in enumerate(VOCAB)}
N_CLASSES = 2  # singular / plural


@dataclass(frozen=True)
class SVAExample:
    """One sentence: words, their ids, the label (subject plural?) and the analysis indices."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    label: int
    subject_idx: int
    distractor_idx: int
    verb_idx: int
    hard: bool
    invariant_subject: bool


def _noun_phrase(rng: np.random.Generator, plural: int) -> tuple[list[str], str]:
    """'the [ADJ] NOUN' with the noun inflected for ``plural``; returns (words, noun)."""
    noun = NOUNS[rng.integers(len(NOUNS))][plural]
    words = ["the"] + ([ADJECTIVES[rng.integers(len(ADJECTIVES))]] if rng.random() < 0.5 else []) + [noun]
    return words, noun


def generate(n: int, seed: int) -> list[SVAExample]:
    """Generate ``n`` SVA sentences deterministically from ``seed`` (same seed -> same list)."""
    rng = np.random.default_rng(seed)
    out: list[SVAExample] = []
    for _ in range(n):
        subj_num, dist_num = int(rng.integers(2)), int(rng.integers(2))
        subj_words, subj = _noun_phrase(rng, subj_num)
        prep = PREPOSITIONS[rng.integers(len(PREPOSITIONS))]
        dist_words, _ = _noun_phrase(rng, dist_num)
        tokens = tuple(subj_words + [prep] + dist_words + ["<verb>"])
        out.append(
            SVAExample(
                tokens=tokens,
                ids=tuple(WORD_TO_ID[w] for w in tokens),
                label=subj_num,
                subject_idx=len(subj_words) - 1,
                distractor_idx=len(tokens) - 2,
                verb_idx=len(tokens) - 1,
                hard=subj_num != dist_num,
                invariant_subject=subj in INVARIANT,
            )
        )
    return out
