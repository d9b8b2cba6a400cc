"""Internal names as the one looking may see them (kvlab.visibility): `{% load visibility %}`.

{% job_target job %}            the job's server name or URL, or a placeholder for strangers
{% job_text job job.error %}    a job's text with the server's address hidden from strangers
{% sweep_text sweep sweep.error %}  a sweep's text with its host, worker and paths hidden from strangers
{% shown host.name "host" %}    the name, or that kind's placeholder (kvlab.visibility.PLACEHOLDERS)
{{ line.reason|as_uploaded }}   a reason stored before uploads were named as uploaded
{% if user|may_see %}...{% endif %}
"""

from __future__ import annotations

from typing import Any

from django import template

from kvlab import visibility

register = template.Library()


def _user(context: template.Context) -> Any:
    request = context.get("request")
    return getattr(request, "user", None) or context.get("user")


@register.filter
def may_see(user: Any) -> bool:
    return visibility.may_see(user)


@register.simple_tag(takes_context=True)
def job_target(context: template.Context, job: Any) -> str:
    return visibility.job_target(job, _user(context))


@register.simple_tag(takes_context=True)
def job_text(context: template.Context, job: Any, text: Any) -> str:
    return visibility.job_text(str(text or ""), job, _user(context))


@register.simple_tag(takes_context=True)
def sweep_text(context: template.Context, sweep: Any, text: Any) -> str:
    return visibility.sweep_text(str(text or ""), sweep, _user(context))


@register.simple_tag(takes_context=True)
def run_text(context: template.Context, run: Any, text: Any) -> str:
    """A request's error on a run's page: a run kvlab measured hides its job's server from strangers."""
    text = str(text or "")
    user = _user(context)
    if visibility.may_see(user) or not text or not run.job_id:
        return text
    return visibility.job_text(text, run.job, user)  # the job is read once, for a stranger, then kept


@register.simple_tag(takes_context=True)
def shown(context: template.Context, name: Any, kind: str) -> str:
    return str(name or "") if visibility.may_see(_user(context)) else visibility.PLACEHOLDERS[kind]


@register.filter
def as_uploaded(reason: Any) -> str:
    return visibility.as_uploaded(str(reason or ""))
