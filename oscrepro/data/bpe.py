"""GPT-2 byte-level BPE (vocabulary 50,257), loaded offline from OpenAI's release files (coupledqk Sec. 3.2).

The paper tokenises WikiText-103, PubMed and OpenWebText with "GPT-2 BPE tokenization (vocab=50,257)". This module
builds that tokenizer with the ``tokenizers`` library from the two files OpenAI published, found through the
framework's data path (:mod:`oscrepro.data.paths`) in the folder ``gpt2_tokenizer``:

* ``vocab.json`` + ``merges.txt`` (Hugging Face names), or
* ``encoder.json`` + ``vocab.bpe`` (OpenAI's names; the shared copy, byte-identical to the files tiktoken pins).

The pipeline is GPT-2's: the ByteLevel pre-tokenizer (GPT-2 split regex, bytes mapped to printable unicode, no
prefix space), the BPE merges, the ByteLevel decoder. ``<|endoftext|>`` (id 50256, :data:`EOS_ID`) is registered as
a special token, so the literal string in a text encodes to that id (as HF ``GPT2TokenizerFast`` does); decode with
``skip_special_tokens=False`` to get such a text back unchanged. Byte-level BPE is lossless: ``decode(encode(s))
== s`` for every valid unicode string. Nothing is downloaded: a missing folder raises ``DatasetNotFoundError``
naming the URLs of the two files.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from oscrepro.data.fingerprint import fingerprint_files
from oscrepro.data.paths import candidate_dirs, missing_dataset_error

DATASET_NAME = "gpt2_tokenizer"
EOS_TOKEN = "<|endoftext|>"
EOS_ID = 50256  # the last id of GPT-2's vocabulary; GPT-2 separates documents with it
VOCAB_SIZE = 50257
# (vocab, merges) file names, first layout found in a folder wins
LAYOUTS: tuple[tuple[str, str], ...] = (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe"))
OPENAI_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main"


def tokenizer_files(data_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """(vocab, merges) of the first ``gpt2_tokenizer`` folder in lookup order that holds one complete layout."""
    looked = candidate_dirs(DATASET_NAME, data_dir)
    for cand in looked:
        for vocab, merges in LAYOUTS:
            if (cand / vocab).is_file() and (cand / merges).is_file():
                return cand / vocab, cand / merges
    how = (
        f"  - the folder needs {' + '.join(LAYOUTS[0])} (Hugging Face names) or {' + '.join(LAYOUTS[1])} "
        f"(OpenAI names),\n"
        f"  - e.g. from {OPENAI_URL}/encoder.json and {OPENAI_URL}/vocab.bpe (nothing is downloaded automatically)"
    )
    raise missing_dataset_error(DATASET_NAME, looked, how)


@functools.lru_cache(maxsize=4)
def _load(vocab: str, merges: str) -> Tokenizer:
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2 regex split + byte -> unicode map
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOS_TOKEN, special=True)])  # already in the vocabulary: keeps id 50256
    if tok.get_vocab_size() != VOCAB_SIZE or tok.token_to_id(EOS_TOKEN) != EOS_ID:
        raise ValueError(
            f"{vocab}: expected GPT-2's {VOCAB_SIZE:,} entries with {EOS_TOKEN}={EOS_ID}, got "
            f"{tok.get_vocab_size():,} entries and {EOS_TOKEN}={tok.token_to_id(EOS_TOKEN)}"
        )
    return tok


def gpt2_tokenizer(data_dir: str | os.PathLike[str] | None = None) -> Tokenizer:
    """GPT-2's byte-level BPE (50,257 ids, ``<|endoftext|>`` = 50256), cached per file pair.

    The returned object is shared between callers: do not change its settings (truncation, padding).
    """
    vocab, merges = tokenizer_files(data_dir)
    return _load(str(vocab.resolve()), str(merges.resolve()))


def tokenizer_digest(data_dir: str | os.PathLike[str] | None = None,
                     cache_override: str | os.PathLike[str] | None = None) -> str:
    """16-hex content fingerprint of the (vocab, merges) pair: the tokenizer half of an encoded-ids cache key."""
    return fingerprint_files(list(tokenizer_files(data_dir)), cache_override=cache_override)
