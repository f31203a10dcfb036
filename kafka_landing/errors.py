"""The errors a landing can end with, shared by the steps that raise them.

Whether a retry can help is decided where the error is turned into a Dagster
failure (`hours.py`): an unreachable broker or registry is transient, anything
the data or the config says is terminal and is never retried blindly.
"""


class LandingError(RuntimeError):
    """An hour that could not be landed; nothing of the attempt was published."""


class DeadLetterLimitExceeded(LandingError):
    """More dead letters than the topic's dead_letter_limit allows: the attempt is kept aside, unpublished."""
