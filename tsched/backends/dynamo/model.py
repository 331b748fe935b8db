"""The tiny model the Dynamo mocker serves: its files, written where a service runs (no fetch)."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["tiny_model_path", "tiny_model_files", "write_tiny_model"]


#: The packaged tiny model's name in ``tsched/data``.
TINY_MODEL = "tiny-model"


#: Words of the tiny model's vocabulary (``w0 … w255``), besides ``<unk>``, ``<s>``, ``</s>``.
TINY_VOCAB_WORDS = 256


#: Context length the tiny model declares (config and tokenizer), long enough for agent contexts.
TINY_CONTEXT_TOKENS = 131072


def tiny_model_path() -> Path:
    """The folder of the tiny model shipped with tsched: what the mocker engine needs to serve
    (``config.json``, ``tokenizer.json``, ``tokenizer_config.json``) and no weights. A spec for
    the mocker without ``model.path`` uses it; :func:`write_tiny_model` makes it."""
    from importlib.resources import files

    return Path(str(files("tsched.data") / TINY_MODEL))


def tiny_model_files() -> dict[str, str]:
    """The tiny model's files (name → JSON text): a llama-like ``config.json`` of 2 layers and
    hidden size 64, a whitespace-split WordLevel ``tokenizer.json`` whose vocabulary is
    ``<unk> <s> </s> w0 … w255`` (a prompt of N words "w1 w2 …" is N tokens), and a
    ``tokenizer_config.json`` with a chat template that joins the messages' contents. The
    tokenizer JSON is written in the ``tokenizers`` library's own format; the test suite checks
    it against that library's output."""

    specials = ["<unk>", "<s>", "</s>"]
    vocab = {w: i for i, w in enumerate(specials + [f"w{i}" for i in range(TINY_VOCAB_WORDS)])}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }  # fmt: skip
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "vocab_size": len(vocab),
        "max_position_embeddings": TINY_CONTEXT_TOKENS, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float16",
    }  # fmt: skip
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": TINY_CONTEXT_TOKENS,
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }  # fmt: skip
    return {
        "config.json": json.dumps(config, indent=1) + "\n",
        "tokenizer.json": json.dumps(tokenizer, separators=(",", ":")) + "\n",
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=1) + "\n",
    }


def write_tiny_model(path: str | os.PathLike[str]) -> Path:
    """Write the tiny model (:func:`tiny_model_files`) into folder ``path``; returns it.

    Examples
    --------
    >>> import tempfile
    >>> folder = write_tiny_model(tempfile.mkdtemp())
    >>> sorted(p.name for p in folder.iterdir())
    ['config.json', 'tokenizer.json', 'tokenizer_config.json']
    """
    from tsched._io import atomic_write_text

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tiny_model_files().items():
        atomic_write_text(folder / name, text)
    return folder
