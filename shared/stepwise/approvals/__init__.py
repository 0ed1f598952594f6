"""The human side of an approval: signed links, the pages behind them, and the two decisions.

A paused run waits on a Step Functions task token stored on its interaction item. Nothing here ever
sees that token: a human gets a signed link naming the interaction, and the server, after checking
the link and winning the conditional `pending → answered` update, sends the task token itself.
"""

from __future__ import annotations

from typing import Literal, TypeGuard, get_args

Decision = Literal["approve", "deny"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)


def is_decision(value: object) -> TypeGuard[Decision]:
    return value in DECISIONS
