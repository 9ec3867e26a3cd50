"""Markdown the project hands out (harness.core.markdown)."""

import re

import hypothesis
from hypothesis import strategies

from harness.core import markdown


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(strategies.text(alphabet="`a \n~", max_size=40))
def test_a_fenced_text_is_closed_only_by_its_own_closing_fence(text):
    """CommonMark closes a backtick code block at the first line of at least as many backticks (up to
    3 spaces before, spaces after): in what the issue texts and the exploration summary hand out, that
    line is the block's last, whatever the text holds."""
    lines = markdown.fence(text, "python").split("\n")
    opening = len(lines[0]) - len(lines[0].lstrip("`"))
    closes = [i for i, line in enumerate(lines[1:], 1)
              if re.fullmatch(r" {0,3}(`{%d,}) *" % opening, line)]
    assert closes[0] == len(lines) - 1, lines


def test_inline_code_holds_a_message_that_quotes_code():
    # finding 4's error quotes `forward-loss-backward`: one backtick would end the span there
    from harness.core.markdown import code

    said = "RuntimeError: Activation checkpoint rematerialization in `forward-loss-backward` graph"
    assert code(said) == f"`` {said} ``" and code("plain") == "`plain`"
    assert code("ends with `x`") == "`` ends with `x` ``" and code("a `` b") == "``` a `` b ```"
