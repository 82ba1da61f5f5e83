"""Whether the Prefect API answers: its /health endpoint asked every few seconds, in a thread.
Any HTTP answer counts (a server that wants credentials, as Prefect Cloud, or lacks the path, is
there all the same); only no answer (refused, reset, timed out) is silence."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request

EVERY = 2.0  # seconds between questions
ANSWER_WITHIN = 5.0  # seconds a question waits for its answer


def _answers(url: str) -> bool:
    """Whether ``url`` gives any HTTP answer within ANSWER_WITHIN seconds."""
    try:
        urllib.request.urlopen(url, timeout=ANSWER_WITHIN).close()
    except urllib.error.HTTPError:  # an answer all the same
        return True
    except (OSError, http.client.HTTPException):  # refused, reset, timed out, garbled
        return False
    return True


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
            if _answers(self._url):
                self._answered = time.monotonic()
            self._stop.wait(EVERY)

    def silent_for(self) -> float:
        return time.monotonic() - self._answered if self._url else 0.0

    def stop(self) -> None:
        self._stop.set()
