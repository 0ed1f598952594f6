"""Model text as `chunk` events, batched: one DynamoDB write per batch, not per token."""

from __future__ import annotations

import time
from collections.abc import Callable

from stepwise.runs import events

CHUNK_CHARS = 400  # about 100 tokens
CHUNK_SECONDS = 0.25  # a slow model still shows progress


class ChunkBatcher:
    """Buffers deltas and writes them as `chunk` events. Each chunk carries its character offset in the
    step's text, so a client can drop text it already has if Step Functions retries the step."""

    def __init__(
        self, tenant_id: str, run_id: str, step: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.tenant_id, self.run_id, self.step = tenant_id, run_id, step
        self._clock = clock
        self._buffer: list[str] = []
        self._buffered = 0
        self._offset = 0
        self._last = clock()
        self.writes = 0

    def __call__(self, delta: str) -> None:
        if not delta:
            return
        self._buffer.append(delta)
        self._buffered += len(delta)
        if self._buffered >= CHUNK_CHARS or self._clock() - self._last >= CHUNK_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        text = "".join(self._buffer)
        events.emit(
            self.tenant_id, self.run_id, "chunk", {"step": self.step, "offset": self._offset, "text": text}
        )
        self.writes += 1
        self._offset += len(text)
        self._buffer, self._buffered, self._last = [], 0, self._clock()
