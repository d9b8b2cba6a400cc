"""The life of a job or a sweep, and its state changes as conditional UPDATEs.

Every change is one UPDATE guarded by the state it leaves, then a check that one
row changed: a redelivered task cannot claim twice, a finished job cannot finish
again, and the reaper cannot fail a job whose heartbeat moved meanwhile.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class WorkState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Work(models.Model):
    """What a job and a sweep share: state, owner, heartbeat, cancel request, error."""

    State = WorkState
    FINISHED = (State.SUCCEEDED, State.FAILED, State.CANCELLED)

    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    worker = models.CharField(max_length=200, blank=True)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)

    class Meta:
        abstract = True

    @property
    def finished(self) -> bool:
        return self.state in self.FINISHED

    @classmethod
    def _move(cls, pk: int, source: str, **changes: Any) -> bool:
        return cls._default_manager.filter(pk=pk, state=source, **changes.pop("where", {})).update(**changes) == 1

    @classmethod
    def claim(cls, pk: int, worker: str, **changes: Any) -> bool:
        """queued → running, unless a cancel came first."""
        now = timezone.now()
        return cls._move(
            pk, WorkState.QUEUED, where={"cancel_requested": False},
            state=WorkState.RUNNING, heartbeat_at=now, worker=worker[:200], **changes,
        )  # fmt: skip

    @classmethod
    def finish(cls, pk: int, state: str, error: str = "", **changes: Any) -> bool:
        """running → a final state, once."""
        return cls._move(pk, WorkState.RUNNING, state=state, finished_at=timezone.now(), error=error[:5000], **changes)

    @classmethod
    def fail_silent(cls, pk: int, last_heartbeat: datetime, error: str, **changes: Any) -> bool:
        """running → failed, only if its heartbeat is still the one the reaper saw."""
        return cls._move(
            pk, WorkState.RUNNING, where={"heartbeat_at": last_heartbeat},
            state=WorkState.FAILED, finished_at=timezone.now(), error=error[:5000], **changes,
        )  # fmt: skip

    @classmethod
    def cancel(cls, pk: int) -> str:
        """A queued one is cancelled at once; a running one when its worker next looks.

        Returns "cancelled", "requested" or "finished" (nothing to cancel).
        """
        if cls._move(
            pk, WorkState.QUEUED,
            state=WorkState.CANCELLED, cancel_requested=True, finished_at=timezone.now(),
            error="cancelled before it ran",
        ):  # fmt: skip
            return "cancelled"
        if cls._move(pk, WorkState.RUNNING, cancel_requested=True):
            return "requested"
        return "finished"

    @classmethod
    def beat_and_cancel_requested(cls, pk: int, **changes: Any) -> bool:
        """Write the heartbeat (and progress), and say whether a cancel has been requested."""
        cls._default_manager.filter(pk=pk).update(heartbeat_at=timezone.now(), **changes)
        return cls._default_manager.filter(pk=pk, cancel_requested=True).exists()

    def may_cancel(self, user: Any) -> bool:
        """Who may cancel: the user who submitted it, or staff."""
        return bool(user.is_authenticated and (user.is_staff or (self.created_by_id and self.created_by_id == user.pk)))
