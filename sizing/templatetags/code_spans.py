"""Text written with `code` spans (llama.cpp's flags in the fit's changes) shown as HTML: escaped, each
span a <code> element, never the raw backticks."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

_SPAN = re.compile(r"`([^`]+)`")


@register.filter
def code_spans(text: str) -> SafeString:
    return mark_safe(_SPAN.sub(r"<code>\1</code>", escape(text)))  # noqa: S308 - escaped first, then only <code> added
