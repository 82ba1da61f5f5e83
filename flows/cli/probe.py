"""Whether the Prefect API answers: its /health endpoint asked every few seconds, in a thread,
with Prefect's own TLS settings. Any HTTP answer counts (a server that wants credentials, as
Prefect Cloud, or lacks the path, is there all the same); only no answer (refused, reset, timed
out) is silence, and silence is counted from the first question that went unanswered since the
last answer, so a process that was stopped (Ctrl-Z, a paused container) is not taken for one
that Prefect left."""

from __future__ import annotations

import ssl
import threading
import time

import httpx

EVERY = 2.0  # seconds between questions
ANSWER_WITHIN = 5.0  # seconds a question waits for its answer


def prefect_verify(skip: bool, cert_file: str | None) -> bool | ssl.SSLContext:
    """httpx's ``verify`` from Prefect's TLS settings (PREFECT_API_TLS_INSECURE_SKIP_VERIFY,
    PREFECT_API_SSL_CERT_FILE), as Prefect's own client reads them."""
    if skip:
        return False
    return ssl.create_default_context(cafile=cert_file) if cert_file else True


def _answers(url: str, verify: bool | ssl.SSLContext) -> bool:
    """Whether ``url`` gives any HTTP answer within ANSWER_WITHIN seconds."""
    try:
        httpx.get(url, timeout=ANSWER_WITHIN, verify=verify)
    except httpx.HTTPError:  # refused, reset, timed out, garbled
        return False
    return True


class PrefectProbe:
    """Asks ``{api}/health`` until ``stop()``; ``silent_for()`` is how long since the first
    question unanswered after the last answer (0 while the last one was answered, and always 0
    without an API URL). ``verify`` is Prefect's TLS setting (:func:`prefect_verify`)."""

    def __init__(self, api: str | None, verify: bool | ssl.SSLContext = True):
        self._url = f"{api.rstrip('/')}/health" if api else None
        self._verify = verify
        self._unanswered_since: float | None = None
        self._stop = threading.Event()
        if self._url:
            threading.Thread(target=self._ask, name="biasaudit-prefect-probe", daemon=True).start()

    def _ask(self) -> None:
        assert self._url
        while not self._stop.is_set():
            asked = time.monotonic()
            if _answers(self._url, self._verify):
                self._unanswered_since = None
            elif self._unanswered_since is None:
                self._unanswered_since = asked
            self._stop.wait(EVERY)

    def silent_for(self) -> float:
        since = self._unanswered_since
        return 0.0 if since is None else time.monotonic() - since

    def stop(self) -> None:
        self._stop.set()
