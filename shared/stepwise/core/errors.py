"""Named errors.

Two families live here. `ApiError` subclasses carry an HTTP status and a stable `code`; the API maps
them to `{"error": {"code", "message", "details"}}` in one place. The step errors are raised by the
Lambda steps and reach Step Functions under their class name (the Lambda `errorType`), so the ASL can
`Retry` and `Catch` them by name: renaming one is a contract change with statemachine/.
"""

from __future__ import annotations

from typing import Any


def error_details(details: Any) -> dict[str, Any]:
    """`details` as every error answers it: always an object, so a client reads it one way. Field
    errors (a list of `{loc, msg, type}`) go under `errors`; nothing is `{}`."""
    if details is None:
        return {}
    if isinstance(details, dict):
        return details
    if isinstance(details, list | tuple):
        return {"errors": list(details)}
    return {"value": details}


class ApiError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = error_details(details)

    def headers(self) -> dict[str, str]:
        """Headers the error's response carries besides the body (e.g. Retry-After)."""
        return {}


class Malformed(ApiError):
    status = 400
    code = "malformed_request"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class Gone(ApiError):
    status = 410
    code = "gone"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class BadGateway(ApiError):
    """The model behind a synchronous call failed."""

    status = 502
    code = "model_error"


class Unavailable(ApiError):
    status = 503
    code = "unavailable"


class Unprocessable(ApiError):
    status = 422
    code = "validation_error"


class QuotaExceeded(ApiError):
    """A per-tenant limit is reached: 429 with `Retry-After` (seconds)."""

    status = 429
    code = "quota_exceeded"

    def __init__(self, message: str, *, retry_after: int, details: Any = None) -> None:
        super().__init__(message, details=details)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


# --- Step errors: the ASL retries and catches these by name -----------------------------------


class StepError(Exception):
    """Base of the errors a Lambda step raises on purpose; `code` is what the run record shows."""

    code = "step_failed"


class RateLimited(StepError):
    """The model provider throttled us; the ASL retries with backoff and jitter."""

    code = "rate_limited"


class ProviderUnavailable(StepError):
    """The model provider failed (5xx, timeout, connection); the ASL retries with backoff and jitter."""

    code = "provider_unavailable"


class TenantStepsBusy(StepError):
    """The tenant's share of concurrent steps is taken (stepwise.runs.shares): the ASL retries with
    backoff and jitter, so the run waits its turn while other tenants' runs go on."""

    code = "tenant_busy"


class ModelError(StepError):
    """The model call failed in a way retrying cannot fix (bad request, auth, unknown model)."""

    code = "model_error"


class RunStateError(StepError):
    """The run is not in a state this step can act on (deleted, already finished)."""

    code = "run_state"


class AgentGone(StepError):
    """The run's agent was deleted while the run was queued or running."""

    code = "agent_not_found"


class DoomLoop(StepError):
    """The model asked for the same tool with the same arguments three times in a row."""

    code = "doom_loop"


class HookDenied(StepError):
    """An OnRunStart hook refused the run."""

    code = "hook_denied"


class BudgetExceeded(StepError):
    """The next model call would spend past the run's token budget."""

    code = "budget_exceeded"


class ModelForbidden(ModelError):
    """The run's model is outside the operator's AllowedModels (an agent stored before the bound)."""

    code = "model_not_allowed"


class ModelNotAllowed(Unprocessable):
    """A tenant named a model outside the operator's AllowedModels (an agent's edit, a run's start)."""

    code = "model_not_allowed"


class TenantSuspended(StepError):
    """The operator suspended the run's tenant (STEPWISE_SUSPENDED_TENANTS): the run stops at its next
    step, failed with this code."""

    code = "tenant_suspended"


class ProviderKeyMissing(ModelError):
    """STEPWISE_REQUIRE_TENANT_KEYS is on and neither the agent nor the tenant set the provider's key."""

    code = "provider_key_missing"


class ContextTooLong(ModelError):
    """The prompt is over the model's context window (compaction then retry is the remedy)."""

    code = "context_too_long"


def step_error_code(error_type: str) -> str | None:
    """The run error code for a step error's class name, as Step Functions reports it."""
    pending: list[type[StepError]] = [StepError]
    while pending:
        cls = pending.pop()
        if cls.__name__ == error_type:
            return cls.code
        pending.extend(cls.__subclasses__())
    return None
