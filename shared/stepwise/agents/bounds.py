"""The operator's bounds on what tenants may ask for: which models (AllowedModels, locally
STEPWISE_ALLOWED_MODELS, comma-separated glob patterns).

Checked where a tenant names a model (an agent created or patched: 422) and again where a run is about
to use one (a run started: 422; the model step: the run fails), because an agent stored before the bound
was narrowed, or one that names no model while the default is outside the bound, would otherwise still
reach the model.
"""

from __future__ import annotations

from stepwise.core import config
from stepwise.core.errors import ModelForbidden, ModelNotAllowed
from stepwise.llm.client import resolve_model


def _message(model: str) -> str:
    patterns = ", ".join(config.runtime().allowed_models)
    return f"model {model!r} is not allowed on this deployment (allowed: {patterns})"


def check_named(model: str | None, *, field: str = "model") -> None:
    """422 `model_not_allowed` when a tenant names a model outside the bound (None names none)."""
    if model is None or config.runtime().model_allowed(model.strip()):
        return
    raise ModelNotAllowed(
        _message(model.strip()),
        details=[{"loc": ["body", field], "msg": "model not allowed", "type": "model_not_allowed"}],
    )


def check_effective(agent_model: str | None) -> str:
    """The model a run of this agent would call; 422 `model_not_allowed` when it is outside the bound."""
    model = resolve_model(agent_model)
    if not config.runtime().model_allowed(model):
        raise ModelNotAllowed(_message(model), details={"model": model})
    return model


def allowed_for_step(agent_model: str | None) -> str:
    """The model step's check: the run fails with `model_not_allowed` (ModelForbidden)."""
    model = resolve_model(agent_model)
    if not config.runtime().model_allowed(model):
        raise ModelForbidden(_message(model))
    return model
