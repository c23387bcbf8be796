"""The third-party libraries every probe of a base shares: imported once by the fork server before
it forks (`forkserver`), and by a fresh probe before its tracer starts (`tracing`), so that neither
pays for them per probe."""

from __future__ import annotations

import importlib
import os
import time

#: Shared third-party imports, in the order a fresh scheduler probe first imports them
#: (`sys.modules` order; their cost measured with `python -X importtime`: about three quarters of
#: the probe's import).
SHARED_MODULES = (
    "typing_extensions",
    "torch",
    "numpy",
    "dill",
    "tqdm",
    "packaging",
    "regex",
    "sympy",
    "filelock",
    "networkx",
    "jinja2",
    "prometheus_client",
    "pydantic",
    "psutil",
    "cbor2",
    "zmq",
    "transformers",
    "huggingface_hub",
    "PIL",
    "yaml",
    "tokenizers",
    "safetensors",
    "sentencepiece",
    "aiohttp",
    "requests",
    "openai_harmony",
    "openai",
    "pybase64",
    "cv2",
    "cachetools",
    "msgspec",
    "cloudpickle",
    "uvloop",
    "cpuinfo",
    "xgrammar",
    "tiktoken",
    "fastapi",
    "email_validator",
    "python_multipart",
    "pydantic_extra_types",
    "partial_json_parser",
    "llguidance",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.auto.image_processing_auto",
    "transformers.models.auto.video_processing_auto",
    "transformers.video_processing_utils",
    "transformers.generation.configuration_utils",
    "transformers.modeling_rope_utils",
    "transformers.modeling_gguf_pytorch_utils",
    # What vLLM's own modules pull in after the libraries above (`torch.compile`'s stack for
    # vllm.compilation, setuptools, sqlite3 and a few standard modules): measured in a forked child,
    # its vLLM import took 1.3 s of CPU without them and 0.47 s with them (docs/benchmarks.md).
    "torch._inductor.compile_fx",
    "torch._functorch.aot_autograd",
    "torch._export.non_strict_utils",
    "functorch.compile",
    "setuptools",
    "sqlite3",
    "multiprocessing.shared_memory",
    "multiprocessing.synchronize",
    "concurrent.futures.process",
    "logging.config",
    "logging.handlers",
    "prometheus_client.multiprocess",
    "zmq.asyncio",
)


def import_shared() -> tuple[list[str], float]:
    """Import every shared module this base has; the names imported and the seconds it took."""
    started = time.perf_counter()
    done = []
    for name in SHARED_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a library this base lacks (or cannot load) is simply not shared
            continue
        done.append(name)
    return done, time.perf_counter() - started


def must_import_vllm_first() -> bool:
    """vLLM must set up its CUDA libraries before torch is imported
    (`VLLM_ENABLE_CUDA_COMPATIBILITY`): the shared libraries cannot be imported ahead of it."""
    return os.environ.get("VLLM_ENABLE_CUDA_COMPATIBILITY", "0").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
        "off",
    )
