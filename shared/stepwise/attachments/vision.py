"""Images described in words for a model that cannot see them, by the deployment's vision model
(`STEPWISE_VISION_MODEL`, any litellm model that takes images).

Used where the model is shown a run's files (`render`): an image a blind model would only be told
about is described instead, once. The description is kept beside the image (the derived key, as a
PDF's text is), so later model calls of the run reuse it and nothing is asked twice. A failure of the
vision model (down, throttled, no key) is not the run's failure: the model is told the image is there
and could not be described, and the next call tries again.
"""

from __future__ import annotations

import base64
import logging

from stepwise.attachments import blobs, content
from stepwise.attachments.models import Attachment
from stepwise.core import config

PROMPT = (
    "Describe this image for a reader who cannot see it: what it shows, any text in it (verbatim), and "
    "the values of any chart or table. Be factual and concise: at most 150 words."
)
MAX_TOKENS = 400
DESCRIPTION_LIMIT = 2_000  # characters of a description kept

_log = logging.getLogger(__name__)


def vision_model() -> str | None:
    model = config.models().vision_model
    return model.strip() if model and model.strip() else None


def describe(tenant_id: str, run_id: str, attachment: Attachment, *, cache: bool = True) -> str | None:
    """The image's description (kept after the first time), or None when there is no vision model or it
    failed. Raises content.Missing when the image is no longer stored."""
    model = vision_model()
    if model is None:
        return None
    key = blobs.derived_key(tenant_id, run_id, attachment.attachment_id)
    kept = blobs.read(key)
    if kept is not None:
        return kept.decode()
    data = content.raw(tenant_id, run_id, attachment, cache=cache)
    url = f"data:{attachment.content_type};base64,{base64.b64encode(data).decode()}"
    message = {
        "role": "user",
        "content": [{"type": "text", "text": PROMPT}, {"type": "image_url", "image_url": {"url": url}}],
    }
    from stepwise.llm import client  # litellm loads in the model step, where this runs

    try:
        turn = client.complete(model=model, messages=[message], tools=None, max_tokens=MAX_TOKENS)
    except Exception as exc:  # noqa: BLE001 - the vision model's failure is a note to the model, not the run's
        _log.warning("the vision model could not describe an image: %s", type(exc).__name__)
        return None
    text = (turn.text or "").strip()[:DESCRIPTION_LIMIT]
    if not text:
        return None
    blobs.put(key, text.encode(), "text/plain; charset=utf-8")
    return text
