"""The Celery application; workers start with `celery -A kvlab worker`.

The worker's own hooks (its launch host announcement) are the benchmarks app's: it connects them
when Django loads it (BenchmarksConfig.ready), so this module imports nothing of the app.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kvlab.settings")

app = Celery("kvlab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
