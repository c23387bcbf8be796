"""The scripted model: vocabulary, target streams, drafter and verifier.

Pure standard library, because two very different places need the same
semantics: the probe (inside a branch environment, next to vLLM) plays the
model with it, and the oracle (outer layer, no vLLM) predicts the correct
statistics from it. Everything here is a function of the scenario and of
(seed, request id, position) only, so a request behaves identically whatever
batch it runs in: order independence holds by construction.
"""

from __future__ import annotations

import hashlib
import re
import string
from typing import Any

#: Special tokens first, so their ids are small and stable.
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>", "<stop>", "<sep>")
#: Every other token is one printable character.
CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + " .,!?-:;'\"{}[]()_=+*/#@"
VOCAB: tuple[str, ...] = SPECIALS + tuple(CHARS)
TOKEN_ID: dict[str, int] = {tok: i for i, tok in enumerate(VOCAB)}
#: The drafter pads invalid draft slots with this; the verifier never accepts it.
PAD_DRAFT = -1
#: What the model runner fills a step's drafts with when it skips the drafter (#34734). Here as in a
#: real vocabulary, id 0 is a real token (`<pad>`): the verifier accepts it where the target has it.
ZERO_FILL = 0
#: The scripted model's context length: prompt, output and the drafts of a step must fit in it
#: (the scenario loader refuses a request that would not, instead of vLLM capping it silently).
MAX_MODEL_LEN = 8192
#: Tokens per KV block of the probe's scheduler (prefix-cache hits come in whole blocks of it).
BLOCK_SIZE = 16

_TOKEN_RE = re.compile(r"<[a-z]+>|.", re.DOTALL)
_DEFAULT_ALPHABET = string.ascii_lowercase


class ScriptError(ValueError):
    """A token string or drafter description that the script cannot play."""


def tokens(text: str) -> list[int]:
    """`"ab<eos>"` -> ids: one character per token, `<name>` for a special token."""
    out = []
    for piece in _TOKEN_RE.findall(text):
        if piece not in TOKEN_ID:
            raise ScriptError(
                f"unknown token {piece!r} in {text!r} (specials: {', '.join(SPECIALS)})"
            )
        out.append(TOKEN_ID[piece])
    return out


def token(text: str) -> int:
    """Exactly one token."""
    ids = tokens(text)
    if len(ids) != 1:
        raise ScriptError(f"{text!r} is {len(ids)} tokens, expected exactly one")
    return ids[0]


def text(ids: list[int]) -> str:
    """Inverse of `tokens`, with `-1` shown as `_` (readable step records)."""
    return "".join(
        "_" if i == PAD_DRAFT else VOCAB[i] if 0 <= i < len(VOCAB) else f"<{i}>" for i in ids
    )


def unit(*key: Any) -> float:
    """A deterministic number in [0, 1) for a key: hash-based, so independent of call order."""
    digest = hashlib.sha256(repr(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def target_stream(req: dict[str, Any], seed: int) -> list[int]:
    """The tokens the target model would generate for this request, stops ignored."""
    target = req["target"]
    if isinstance(target, str):
        return tokens(target)
    spec = target["random"]
    alphabet = tokens(spec.get("alphabet") or _DEFAULT_ALPHABET)
    return [
        alphabet[int(unit(seed, req["id"], "target", i) * len(alphabet))]
        for i in range(spec["length"])
    ]


def _wrong_token(right: int | None, key: tuple[Any, ...]) -> int:
    """A token different from `right`, chosen deterministically from the lowercase letters."""
    pool = [t for t in tokens(_DEFAULT_ALPHABET) if t != right]
    return pool[int(unit(*key) * len(pool))]


def propose(
    req: dict[str, Any], seed: int, k: int, target: list[int], position: int, decode_index: int
) -> list[int]:
    """Drafts for the request's `decode_index`-th verification step, whose first draft sits at
    `position`.

    scripted: `steps[decode_index]` as a token string (empty/None = no drafts), then
    `then` (`none`: no drafts, `perfect`: the next k target tokens). random: k
    drafts, each equal to the target token with probability `acceptance`.
    """
    drafter = req.get("drafter") or {"kind": "scripted", "steps": [], "then": "none"}
    if drafter["kind"] == "scripted":
        steps = drafter.get("steps") or []
        if decode_index < len(steps):
            return tokens(steps[decode_index] or "")[:k]
        if drafter.get("then", "none") == "perfect":
            return target[position : position + k]
        return []
    if drafter["kind"] == "random":
        rate = float(drafter["acceptance"])
        out = []
        for i in range(k):
            right = target[position + i] if position + i < len(target) else None
            key = (seed, req["id"], position, i)
            if right is not None and unit(*key, "hit") < rate:
                out.append(right)
            else:
                out.append(_wrong_token(right, (*key, "miss")))
        return out
    raise ScriptError(f"unknown drafter kind {drafter['kind']!r}")


def drafting_skipped(req: dict[str, Any], decode_index: int) -> bool:
    """Whether the runner skipped the drafter for this verification step (`drafter.skipped`,
    1-based)."""
    drafter = req.get("drafter") or {}
    return decode_index + 1 in (drafter.get("skipped") or ())


def runner_drafts(
    req: dict[str, Any], seed: int, k: int, target: list[int], position: int, decode_index: int
) -> tuple[list[int], bool]:
    """What the model runner hands the scheduler for a step: (draft ids, drafting skipped).

    A skipped drafter's step is k zeros, as vLLM's runner zero-fills `_draft_token_ids`.
    """
    if drafting_skipped(req, decode_index):
        return [ZERO_FILL] * k, True
    return propose(req, seed, k, target, position, decode_index), False


def verify(target: list[int], position: int, drafts: list[int]) -> list[int]:
    """Greedy verification: accept drafts while they equal the target, then one bonus token.

    Returns the sampled tokens (accepted drafts + bonus), before any stop handling.
    A `-1` pad never matches. Raises if the target stream runs out.
    """
    accepted = 0
    for i, d in enumerate(drafts):
        if d == PAD_DRAFT or position + i >= len(target) or d != target[position + i]:
            break
        accepted += 1
    end = position + accepted + 1
    if end > len(target):
        raise ScriptError(f"target stream too short: needs {end} tokens, has {len(target)}")
    return target[position:end]


class ChoiceGrammar:
    """Pure-Python twin of xgrammar's `choice` grammar: the output is one of the strings, then a
    stop token.

    Same rules as xgrammar's matcher over a single-character vocabulary: a
    character is valid while the text stays a prefix of some choice; a stop
    token is valid only when the text is exactly a choice, and ends the grammar.
    """

    def __init__(self, choices: list[str], stop_ids: set[int]) -> None:
        self.choices = [tokens(c) for c in choices]
        self.stop_ids = stop_ids

    def _valid_next(self, done: list[int], tok: int) -> bool:
        n = len(done)
        if tok in self.stop_ids:
            return any(c == done for c in self.choices)
        return any(len(c) > n and c[:n] == done and c[n] == tok for c in self.choices)

    def valid_prefix(self, done: list[int], candidate: list[int]) -> list[int]:
        """The longest prefix of `candidate` the grammar accepts after `done` (as vLLM's
        validate_tokens)."""
        if done and done[-1] in self.stop_ids:
            return []
        state = list(done)
        out = []
        for tok in candidate:
            if not self._valid_next(state, tok):
                break
            out.append(tok)
            state.append(tok)
            if tok in self.stop_ids:
                break
        return out

    def accepts(self, output: list[int]) -> bool:
        """True if every token of `output` is valid in sequence."""
        return len(self.valid_prefix([], output)) == len(output)


def grammar_for(req: dict[str, Any], eos_id: int, stop_ids: list[int]) -> ChoiceGrammar | None:
    grammar = req.get("grammar")
    if not grammar:
        return None
    return ChoiceGrammar(list(grammar["choice"]), {eos_id, *stop_ids})
