"""A real (random) tiny Llama for the engine tier, built locally from a seed.

The engine tier needs weights the real engine can load and run on CPU, and a
tokenizer xgrammar can compile grammars against; nothing may come from a hub.
Everything here is a deterministic function of `RECIPE`: a byte-level BPE
tokenizer trained on a generated corpus, and a `LlamaForCausalLM` initialised
under `torch.manual_seed`. The directory is keyed by the recipe's hash and
built atomically (temp dir + rename), so every branch's probe shares one copy
and a concurrent builder never sees a half-written one.

Runs inside a branch environment (torch, transformers, tokenizers available).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from ..common.atomic_dir import ensure_built

#: Everything the directory's content depends on; change `v` when the code below changes behaviour.
RECIPE: dict[str, Any] = {
    "v": 1,
    "seed": 1234,
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,  # the CPU attention backend rejects smaller heads
    "initializer_range": 0.02,
    "max_position_embeddings": 2048,
    "corpus_lines": 3000,
}
SPECIALS = ("<|bos|>", "<|eos|>", "<|pad|>")
MANIFEST = "difftest-manifest.json"

_WORDS = (
    "the a an of to in is on at for with and or not be it this that from by as are was were we you "
    "they token draft accept verify stop end step batch model engine cache block queue grammar "
    "json regex choice yes no true false null alpha beta gamma delta one two three four five six "
    "seven eight nine zero red green blue left right up down fast slow high low open close read "
    "write run test pass fail"
).split()


def recipe_key() -> str:
    return hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode()).hexdigest()[:16]


def corpus(seed: int, lines: int) -> list[str]:
    """Deterministic text with words, digits, punctuation and JSON-ish lines, so merges cover
    them."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(lines):
        kind = i % 4
        if kind == 0:
            out.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 14))) + ".")
        elif kind == 1:
            key, val = rng.choice(_WORDS), rng.choice(_WORDS)
            out.append(json.dumps({key: val, "n": rng.randint(0, 999), "ok": rng.random() < 0.5}))
        elif kind == 2:
            out.append("-".join(str(rng.randint(0, 99)) for _ in range(rng.randint(2, 6))))
        else:
            out.append(
                ", ".join(rng.choice(_WORDS).capitalize() for _ in range(rng.randint(2, 6))) + "!"
            )
    return out


def _write_tokenizer(dest: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=RECIPE["vocab_size"],
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(RECIPE["seed"], RECIPE["corpus_lines"]), trainer=trainer)
    tok.save(str(dest / "tokenizer.json"))
    bos, eos, pad = SPECIALS
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": pad,
        "model_max_length": RECIPE["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    (dest / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": bos, "eos_token": eos, "pad_token": pad})
    )
    return tok.get_vocab_size()


def _write_model(dest: Path, vocab_size: int) -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = Tokenizer.from_file(str(dest / "tokenizer.json"))
    ids = {name: tok.token_to_id(name) for name in SPECIALS}
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=RECIPE["hidden_size"],
        intermediate_size=RECIPE["intermediate_size"],
        num_hidden_layers=RECIPE["num_hidden_layers"],
        num_attention_heads=RECIPE["num_attention_heads"],
        num_key_value_heads=RECIPE["num_key_value_heads"],
        head_dim=RECIPE["head_dim"],
        initializer_range=RECIPE["initializer_range"],
        max_position_embeddings=RECIPE["max_position_embeddings"],
        bos_token_id=ids["<|bos|>"],
        eos_token_id=ids["<|eos|>"],
        pad_token_id=ids["<|pad|>"],
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(RECIPE["seed"])
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(str(dest), safe_serialization=True)
    GenerationConfig(
        bos_token_id=ids["<|bos|>"], eos_token_id=ids["<|eos|>"], pad_token_id=ids["<|pad|>"]
    ).save_pretrained(str(dest))


def weights_digest(model_dir: Path) -> str:
    """sha256 of the tensors (names, dtypes, shapes, bytes), independent of file metadata."""
    from safetensors import safe_open

    h = hashlib.sha256()
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        for name in sorted(f.keys()):
            t = f.get_tensor(name).contiguous()
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.numpy().tobytes())
    return h.hexdigest()


def build(dest: Path) -> dict[str, Any]:
    """Write tokenizer, weights, config and generation config into `dest`; return the manifest."""
    vocab_size = _write_tokenizer(dest)
    _write_model(dest, vocab_size)
    manifest = {
        "recipe": RECIPE,
        "key": recipe_key(),
        "vocab_size": vocab_size,
        "weights_sha256": weights_digest(dest),
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def ensure_tiny_model(work_dir: Path) -> Path:
    """Return `<work_dir>/tiny-llama-<key>`, building it first if absent (manifest written last)."""
    return ensure_built(work_dir, f"tiny-llama-{recipe_key()}", MANIFEST, build)


def manifest(model_dir: Path) -> dict[str, Any]:
    return json.loads((model_dir / MANIFEST).read_text())
