"""An offline Hugging Face cache with stand-in `config.json` files for the models tests name.

vLLM's CPU tests around the scheduler build a `ModelConfig` for a model id
(`facebook/opt-125m`); that reads only the model's `config.json`. Nothing may
come from a hub here, so the cache is written locally in the hub's layout
(`models--ORG--NAME/refs/main` -> `snapshots/REV/config.json`) with the
architecture facts of each model's published config, and the tests run with
`HF_HUB_OFFLINE=1`. No weights, no tokenizer: a test that needs them fails the
same way on every branch, and is reported as failing on the baseline too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from difftest.build.tests.folders import build_once
from difftest.core import paths

#: Model id -> the stand-in config (the published config's architecture fields).
STANDINS: dict[str, dict[str, Any]] = {
    "facebook/opt-125m": {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "activation_dropout": 0.0,
        "activation_function": "relu",
        "attention_dropout": 0.0,
        "bos_token_id": 2,
        "do_layer_norm_before": True,
        "dropout": 0.1,
        "eos_token_id": 2,
        "ffn_dim": 3072,
        "hidden_size": 768,
        "init_std": 0.02,
        "layerdrop": 0.0,
        "max_position_embeddings": 2048,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "pad_token_id": 1,
        "prefix": "</s>",
        "torch_dtype": "float16",
        "use_cache": True,
        "vocab_size": 50272,
        "word_embed_proj_dim": 768,
    },
}
DONE = ".difftest-standins.json"


def hub_cache() -> Path:
    """The `HF_HUB_CACHE` folder holding every stand-in (built once per recipe)."""
    recipe = json.dumps(STANDINS, sort_keys=True)
    root = paths.hf_standins_dir() / hashlib.sha256(recipe.encode()).hexdigest()[:12]

    def build(tmp: Path) -> None:
        for model, config in STANDINS.items():
            text = json.dumps(config, indent=2, sort_keys=True) + "\n"
            revision = hashlib.sha1(text.encode()).hexdigest()
            folder = tmp / "hub" / ("models--" + model.replace("/", "--"))
            (folder / "snapshots" / revision).mkdir(parents=True)
            (folder / "snapshots" / revision / "config.json").write_text(text)
            (folder / "refs").mkdir()
            (folder / "refs" / "main").write_text(revision)
        (tmp / DONE).write_text(recipe + "\n")

    return build_once(root, DONE, build) / "hub"
