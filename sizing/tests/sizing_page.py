"""The sizing page as a browser reads and submits it: its result as rendered, the values its form
would submit, and "Size it" pressed again after changing some fields."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from django.test import Client
from django.urls import reverse


def results(response: Any) -> str:
    """The sizing's result as rendered: from its heading to its formula line."""
    return result_html(response.content.decode())


class FormReader(HTMLParser):
    """What a browser submits for #sizing-form: inputs, checked boxes, selected options
    (the first option when none is marked selected), textareas."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.in_form = False
        self.select: str | None = None
        self.first_option: str | None = None
        self.selected = False
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self.in_form = a.get("id") == "sizing-form"
        if not self.in_form:
            return
        name = a.get("name") or ""
        if tag == "input" and name:
            if a.get("type") == "checkbox":
                if "checked" in a:
                    self.values[name] = a.get("value") or "on"
            else:
                self.values[name] = a.get("value") or ""
        elif tag == "select":
            self.select, self.first_option, self.selected = name, None, False
        elif tag == "option" and self.select is not None:
            value = a.get("value") or ""
            if self.first_option is None:
                self.first_option = value
            if "selected" in a:
                self.values[self.select], self.selected = value, True
        elif tag == "textarea":
            self.textarea = name
            self.values[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select" and self.select is not None:
            if not self.selected:
                self.values[self.select] = self.first_option or ""
            self.select = None
        elif tag == "textarea":
            self.textarea = None
        elif tag == "form":
            self.in_form = False

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.values[self.textarea] += data.removeprefix("\n")


def form_values(response: Any) -> dict[str, str]:
    reader = FormReader()
    reader.feed(response.content.decode())
    return reader.values


def size_it_again(client: Client, response: Any, **changes: str) -> Any:
    """Press "Size it" on the rendered page, after changing some fields as a user would."""
    values = form_values(response) | changes
    return client.get(reverse("sizing"), values)


def result_html(html: str) -> str:
    """The sizing's result as rendered: from its heading to its formula line."""
    found = re.search(r"<h2>.*?<p class=\"meta\">Formulas: [^<]*</p>", html, re.S)
    assert found, html[-3000:]
    return found.group(0)
