"""metav1.Time text: RFC 3339 in UTC with whole seconds, as Kubernetes writes it everywhere."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def rfc3339(unix_seconds: float) -> str:
    """1700545800.7 -> "2023-11-21T05:50:00Z" (fractions are dropped, as metav1.Time does)."""
    return datetime.fromtimestamp(int(unix_seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_now() -> str:
    return rfc3339(time.time())
