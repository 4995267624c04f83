"""The scheduler's counters, as ``/health`` and the logs show them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SchedulerStats"]


@dataclass
class SchedulerStats:
    """Counters exposed on ``/health`` and in logs."""

    started: int = 0
    completed: int = 0
    rejected: int = 0
    timed_out: int = 0
    cancelled: int = 0
    preempted: int = 0
    resumed: int = 0
    total_wait_s: float = 0.0
    max_wait_s: float = 0.0
    resume_wait_s: float = 0.0
    max_queue_depth: int = 0

    def as_dict(self, queue_depth: int, busy: int, slots: int) -> dict[str, float | int]:
        mean = self.total_wait_s / self.started if self.started else 0.0
        return {
            "slots": slots,
            "busy_slots": busy,
            "queue_depth": queue_depth,
            "max_queue_depth": self.max_queue_depth,
            "started": self.started,
            "completed": self.completed,
            "rejected": self.rejected,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "preempted": self.preempted,
            "resumed": self.resumed,
            "mean_wait_s": round(mean, 4),
            "max_wait_s": round(self.max_wait_s, 4),
            "resume_wait_s": round(self.resume_wait_s, 4),
        }
