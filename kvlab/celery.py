"""The Celery application; workers start with `celery -A kvlab worker`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kvlab.settings")

app = Celery("kvlab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
