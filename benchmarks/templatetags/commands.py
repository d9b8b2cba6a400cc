"""A command line shown so that it wraps only between its flags: each flag with its value is one unbroken
span (a browser otherwise breaks "--no-kv-unified" after its first hyphen, as "- -no-kv-unified")."""

from __future__ import annotations

import re

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()
_NUMBER = re.compile(r"-\d+(\.\d+)?")


def _groups(words: list[str]) -> list[str]:
    """The words as flag groups: a flag (a word starting with "-", not a negative number) takes the value after it."""
    groups: list[str] = []
    for word in words:
        is_value = not word.startswith("-") or _NUMBER.fullmatch(word) is not None
        if groups and is_value and groups[-1].startswith("-") and " " not in groups[-1]:
            groups[-1] += f" {word}"
        else:
            groups.append(word)
    return groups


@register.filter
def command_words(command: str) -> SafeString:
    """The command escaped, each flag group in a <span class="flag"> (white-space: nowrap), spaces between."""
    spans = format_html_join(" ", '<span class="flag">{}</span>', ((g,) for g in _groups(str(command).split())))
    return format_html("{}", spans)
