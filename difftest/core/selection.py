"""`-k EXPR`: choosing scenarios by name the way pytest's `-k` chooses tests.

A word matches a scenario whose name contains it; words combine with `and`,
`or`, `not` and parentheses (`-k "eos and not engine"`). A malformed expression
is a usage error, reported before anything is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from difftest.core.errors import ConfigError

Matcher = Callable[[str], bool]

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def compile_selection(expression: str) -> Matcher:
    """A predicate over scenario names; raises ConfigError naming the problem."""
    tokens = _TOKEN.findall(expression)
    if not tokens or "".join(tokens) != re.sub(r"\s+", "", expression):
        raise _bad(expression, "it is empty or has characters that are not words or parentheses")
    matcher, rest = _or(tokens, expression)
    if rest:
        raise _bad(expression, f"unexpected {rest[0]!r}")
    return matcher


def _or(tokens: list[str], expression: str) -> tuple[Matcher, list[str]]:
    left, tokens = _and(tokens, expression)
    while tokens and tokens[0] == "or":
        right, tokens = _and(tokens[1:], expression)
        left = (lambda a, b: lambda name: a(name) or b(name))(left, right)
    return left, tokens


def _and(tokens: list[str], expression: str) -> tuple[Matcher, list[str]]:
    left, tokens = _not(tokens, expression)
    while tokens and tokens[0] == "and":
        right, tokens = _not(tokens[1:], expression)
        left = (lambda a, b: lambda name: a(name) and b(name))(left, right)
    return left, tokens


def _not(tokens: list[str], expression: str) -> tuple[Matcher, list[str]]:
    if tokens and tokens[0] == "not":
        inner, rest = _not(tokens[1:], expression)
        return (lambda name: not inner(name)), rest
    return _atom(tokens, expression)


def _atom(tokens: list[str], expression: str) -> tuple[Matcher, list[str]]:
    if not tokens:
        raise _bad(expression, "it ends where a word or '(' was expected")
    head, rest = tokens[0], tokens[1:]
    if head == "(":
        inner, rest = _or(rest, expression)
        if not rest or rest[0] != ")":
            raise _bad(expression, "a '(' is never closed")
        return inner, rest[1:]
    if head in (")", "and", "or"):
        raise _bad(expression, f"unexpected {head!r}")
    return (lambda name: head in name), rest


def _bad(expression: str, why: str) -> ConfigError:
    return ConfigError(
        f"-k {expression!r} is not a valid selection: {why}",
        'use scenario-name words with and / or / not and parentheses, e.g. -k "eos and not engine"',
    )
