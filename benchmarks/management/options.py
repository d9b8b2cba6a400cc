"""What the management commands share: form errors told as command-line options."""

from __future__ import annotations

from django import forms


def form_errors(form: forms.BaseForm, option_names: dict[str, str] | None = None) -> str:
    """One line per error, each named by its option (--field-name, or the name given in option_names)."""
    names = option_names or {}
    lines = []
    for field, errors in form.errors.items():
        name = "" if field == "__all__" else "--" + names.get(field, field).replace("_", "-") + ": "
        lines.extend(f"{name}{error}" for error in errors)
    return "\n".join(lines)
