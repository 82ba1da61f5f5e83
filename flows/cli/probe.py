"""Whether the Prefect API answers: its /health endpoint asked every few seconds, in a thread."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request

EVERY = 2.0  # seconds between questions
ANSWER_WITHIN = 5.0  # seconds a question waits for its answer


class PrefectProbe:
    """Asks ``{api}/health`` until ``stop()``; ``silent_for()`` is how long since the last answer
    (since the start when none came; always 0 without an API URL)."""

    def __init__(self, api: str | None):
        self._url = f"{api.rstrip('/')}/health" if api else None
        self._answered = time.monotonic()
        self._stop = threading.Event()
        if self._url:
            threading.Thread(target=self._ask, name="biasaudit-prefect-probe", daemon=True).start()

    def _ask(self) -> None:
        assert self._url
        while not self._stop.is_set():
            with (
                contextlib.suppress(Exception),
                urllib.request.urlopen(self._url, timeout=ANSWER_WITHIN) as response,
            ):
                if response.status == 200:
                    self._answered = time.monotonic()
            self._stop.wait(EVERY)

    def silent_for(self) -> float:
        return time.monotonic() - self._answered if self._url else 0.0

    def stop(self) -> None:
        self._stop.set()
