"""A local model directory for `ModelConfig`: tokenizer + config.json, built offline.

vLLM's scheduler needs a `ModelConfig`, and structured outputs need a real
tokenizer; nothing may come from a hub. The tokenizer is a WordLevel model over
`script.VOCAB` (one character per token plus special tokens), so scenarios can
write token streams as readable strings. The directory is keyed by a hash of
its recipe and built atomically (temp dir + rename), so every branch probe
shares one copy and a concurrent builder never sees a half-written one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..common.atomic_dir import ensure_built
from . import script

MAX_MODEL_LEN = script.MAX_MODEL_LEN


def _config() -> dict[str, Any]:
    """A tiny Llama config: only read for shapes and limits, no weights are ever loaded."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(script.VOCAB),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": MAX_MODEL_LEN,
        "bos_token_id": script.TOKEN_ID["<bos>"],
        "eos_token_id": script.TOKEN_ID["<eos>"],
        "pad_token_id": script.TOKEN_ID["<pad>"],
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
    }


def _tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": MAX_MODEL_LEN,
        "clean_up_tokenization_spaces": False,
    }


def recipe_key() -> str:
    """Changes whenever anything written below would change."""
    recipe = {"vocab": script.VOCAB, "config": _config(), "tokenizer": _tokenizer_config(), "v": 1}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _write(dest: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel(vocab=dict(script.TOKEN_ID), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(script.SPECIALS))
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(), indent=1))
    (dest / "special_tokens_map.json").write_text(
        json.dumps({k: v for k, v in _tokenizer_config().items() if k.endswith("_token")}, indent=1)
    )
    (dest / "config.json").write_text(json.dumps(_config(), indent=1))
    (dest / "generation_config.json").write_text(
        json.dumps({"eos_token_id": script.TOKEN_ID["<eos>"]})
    )


def ensure_model_dir(work_dir: Path) -> Path:
    """Return `<work_dir>/model-<key>`, building it first if absent."""
    return ensure_built(work_dir, f"model-{recipe_key()}", "config.json", _write)
