"""Where approval requests reach humans: Slack (`slack`) and email (`email`).

Each channel builds its message from pure functions and sends it with one call that raises
ChannelError on failure. Whether a failed channel fails the request is the caller's decision: with two
channels configured, one may be down while the other still reaches somebody.
"""

from __future__ import annotations


class ChannelError(Exception):
    """A message could not be delivered. The text never contains a webhook URL: those are credentials."""
