"""Markdown the project hands out (issue texts, the exploration summary): defined once here, where both
the report and the tools may import it."""

from __future__ import annotations

import re


def fence(text: str, language: str = "") -> str:
    """`text` in a code block whose fence is longer than any run of backticks inside it, so that
    nothing in the text (a script's own Markdown, a diff of a docstring) can close the block early."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{text.rstrip()}\n{ticks}"


def code(text: str) -> str:
    """`text` as inline code, its delimiter longer than any run of backticks inside it (an error
    message that quotes `forward-loss-backward` stays one span)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"
