"""The environment a probe runs in: an explicit allow-list of the caller's, plus difftest's own
settings.

A branch's counting may depend on an environment variable (vLLM reads dozens
of `VLLM_*` switches), so what reaches a probe is part of what its runs depend
on: the result cache keys them on `passed_environ()` (`run.cache.results`).
Everything else of the caller's environment stays out, so an unrelated
variable (a CI token, a shell's history setting) neither reaches branch code
nor changes a cache key.

What passes through (`PASS_THROUGH`, `PASS_THROUGH_PREFIXES`): the basics a
process needs (`PATH`, `HOME`, locale, time zone, temp folder), vLLM's,
torch's, OpenMP's, the BLAS libraries' and CUDA's switches, and any names listed in
`DIFFTEST_PASS_ENV` (comma-separated). difftest's own settings (offline,
in-process engine, caches in its home, threads per probe) are set on top.
"""

from __future__ import annotations

import os

from difftest.core import paths
from difftest.probe.protocol import HOST_PID_ENV, NONCE_ENV, NONCE_FD_ENV

#: Names passed through as they are.
PASS_THROUGH = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "LD_LIBRARY_PATH",
    }
)
#: Prefixes of names passed through.
PASS_THROUGH_PREFIXES = (
    "LC_",
    "VLLM_",
    "TORCH",
    "PYTORCH_",
    "OMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "CUDA_",
    "NCCL_",
)
#: Extra names the user passes through (comma-separated).
PASS_ENV = "DIFFTEST_PASS_ENV"
#: Never passed through: the host's channel to its probes, and Python's own path settings.
_NEVER = frozenset(
    {NONCE_ENV, NONCE_FD_ENV, HOST_PID_ENV, "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
)

#: The environment vLLM 0.32's import gives torch (`vllm/env_override.py`): these it forces ...
VLLM_IMPORT_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
#: ... and these it sets where they are not set.
VLLM_IMPORT_DEFAULTS = {"TRITON_CACHE_AUTOTUNING": "1", "TILELANG_CLEANUP_TEMP_FILES": "1"}


def passed_environ() -> dict[str, str]:
    """The caller's variables that reach a probe (sorted): what the result cache keys runs on."""
    extra = {name.strip() for name in os.environ.get(PASS_ENV, "").split(",") if name.strip()}
    return {
        key: value
        for key, value in sorted(os.environ.items())
        if key not in _NEVER
        and (key in PASS_THROUGH or key in extra or key.startswith(PASS_THROUGH_PREFIXES))
    }


def switches() -> dict[str, str]:
    """The caller's variables that change what a probe does (`VLLM_*`, `TORCH*`, ... and
    `DIFFTEST_PASS_ENV`'s): what a cluster node's probe takes from the host (`run.cluster`)."""
    return {k: v for k, v in passed_environ().items() if k not in PASS_THROUGH}


def machine_environ() -> dict[str, str]:
    """This machine's own basics of the allow-list (`PASS_THROUGH`: its PATH, home, locale, temp
    folder, library path, visible devices): a cluster node's probe takes them from the node."""
    return {k: v for k, v in os.environ.items() if k in PASS_THROUGH and k not in _NEVER}


def probe_environ(parallel: int = 1, passed: dict[str, str] | None = None) -> dict[str, str]:
    """The probe's environment: the allow-listed caller's (or `passed`: a node's basics with the
    host's switches), offline, in-process, caches inside difftest's home.

    Probes running side by side share the cores instead of each starting one
    torch thread per core (oversubscribed, three engines took longer together
    than one after another). Fresh and forked probes get the same environment.
    """
    env = dict(passed_environ() if passed is None else passed)
    threads = str(max(1, (os.cpu_count() or 1) // max(1, parallel)))
    env.setdefault("OMP_NUM_THREADS", threads)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind" if parallel > 1 else "auto")
    # NumPy's (and OpenCV's) OpenBLAS would start a thread pool at import; the probes never multiply
    # matrices with it, and a single-threaded process can be forked safely (`run.probes.forking`).
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    # What vLLM's import sets for torch (`vllm/env_override.py`), set already: the same before and
    # after that import, so libraries a fork server imports earlier read what a fresh probe's read.
    env.update(VLLM_IMPORT_ENV)
    for key, value in VLLM_IMPORT_DEFAULTS.items():
        env.setdefault(key, value)
    cache = paths.vllm_cache_dir()
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(cache / "hf"),
        VLLM_CACHE_ROOT=str(cache),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_CPU_KVCACHE_SPACE="1",
        TOKENIZERS_PARALLELISM="false",
        # The base is shared by every branch: nothing may write bytecode into it.
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env
