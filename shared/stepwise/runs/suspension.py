"""The operator's kill switch for whole tenants: `STEPWISE_SUSPENDED_TENANTS`.

A suspended tenant's every authenticated request is refused with 403 `tenant_suspended` (the API and
events functions, in `stepwise.api.resolver.refused`), its scheduled deliveries start nothing, and its
runs in flight stop at their next step, failed `tenant_suspended` (a step error, so the state machine's
Catch records it through the Failed state like any other).

Why the API and not the authorizer: API Gateway caches the authorizer's answer per key for its TTL, so
a suspension there would lag by that TTL and could only answer a bare 403 without our error shape. Here
the list costs nothing per request: in AWS it is an SSM parameter (named by
`STEPWISE_SUSPENDED_TENANTS_PARAMETER`) read through Powertools Parameters and cached for MAX_AGE_SECONDS
in each warm function, so a change reaches every function within that time, with no redeploy and one
GetParameter per function instance per MAX_AGE_SECONDS. Locally (and in tests: STEPWISE_SECRETS=env, as
for the deployment's secrets) the variable itself holds the list and is read on every call.
"""

from __future__ import annotations

from stepwise.core import config
from stepwise.core.errors import Forbidden, TenantSuspended

MAX_AGE_SECONDS = 30
# SSM cannot hold an empty StringList: the template's parameter starts as this, meaning "nobody".
NOBODY = "-"

__all__ = ["MAX_AGE_SECONDS", "check_request", "check_step", "is_suspended", "suspended_tenants"]


def _parse(raw: str) -> frozenset[str]:
    return frozenset(t.strip() for t in raw.split(",") if t.strip() and t.strip() != NOBODY)


def suspended_tenants() -> frozenset[str]:
    """The tenants suspended now (at most MAX_AGE_SECONDS old in AWS)."""
    switch = config.kill_switch()
    if switch.suspended_parameter is None or config.secrets().source != "aws":
        return _parse(switch.suspended_tenants)
    from aws_lambda_powertools.utilities import parameters

    value = parameters.get_parameter(switch.suspended_parameter, max_age=MAX_AGE_SECONDS)
    return _parse(value if isinstance(value, str) else "")


def is_suspended(tenant_id: str) -> bool:
    return tenant_id in suspended_tenants()


def check_request(tenant_id: str) -> None:
    """403 `tenant_suspended` for a suspended tenant's request."""
    if is_suspended(tenant_id):
        raise Forbidden(
            "this tenant is suspended by the operator; every request is refused until it is lifted",
            code="tenant_suspended",
        )


def check_step(tenant_id: str) -> None:
    """A suspended tenant's run stops here, failed `tenant_suspended`."""
    if is_suspended(tenant_id):
        raise TenantSuspended("the tenant was suspended by the operator; the run was stopped")
