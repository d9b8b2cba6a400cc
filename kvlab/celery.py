"""The Celery application; workers start with `celery -A kvlab worker`."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_ready
from celery.worker.control import control_command

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kvlab.settings")

app = Celery("kvlab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def announce_launch_host(sender: Any, **_: Any) -> None:
    """A worker tells the web app what its machine lets kvlab launch (its own KVLAB_LAUNCH_* settings)."""
    from benchmarks.sweeps.worker_host import announce_worker

    announce_worker(list(sender.app.amqp.queues.consume_from or {}), sender.hostname)


@control_command()
def kvlab_announce(state: Any) -> dict[str, str]:
    """Announce again on request (the launch hosts page's button): new models show without a restart."""
    from benchmarks.sweeps.worker_host import announce_worker

    consumer = state.consumer
    announce_worker(list(consumer.app.amqp.queues.consume_from or {}), consumer.hostname)
    return {"ok": "announced"}
