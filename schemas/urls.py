"""Secrets in database URLs: which parts of a URL are secret, and the URL or text with them hidden.

A password can sit in a URL's password field (``user:pw@host``, any characters percent-encoded) or
in its query string (``?password=...``, libpq's ``sslpassword``, a token), and drivers accept both.
Everything that shows, logs or stores a URL, hands one to Prefect or accepts one in a configuration
file asks this module, so the two forms are treated alike everywhere.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # SQLAlchemy is not imported for the type alone (audit_frame needs none)
    from sqlalchemy.engine import URL

# Query parameters that carry a credential in the drivers' and warehouses' URLs (compared without
# case): PostgreSQL/libpq, MySQL drivers, and the token or key parameters of warehouse dialects.
SECRET_QUERY_KEYS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "sslpassword",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "auth_token",
        "api_key",
        "apikey",
        "private_key",
        "private_key_passphrase",
        "credentials",
        "credentials_base64",
    }
)
HIDDEN = "***"
_SECRET_IN_TEXT = (
    # scheme://user:password@ (the password up to the last @ before the host)
    (re.compile(r"(\w://[^:/@\s]*:)[^\s]*@"), r"\1" + HIDDEN + "@"),
    # ?password=... or &token=... in a URL's query string
    (
        re.compile(r"([?&;](?:" + "|".join(sorted(SECRET_QUERY_KEYS)) + r")=)[^&;\s'\"]*", re.IGNORECASE),
        r"\1" + HIDDEN,
    ),
)


def secret_query_keys(url: URL) -> list[str]:
    """The query parameters of ``url`` that carry a credential."""
    return [key for key in url.query if key.lower() in SECRET_QUERY_KEYS]


def holds_secret(url: URL) -> bool:
    """Whether ``url`` carries a password or another credential anywhere; an empty password
    (``default:@host``: ClickHouse's default user has none) is no secret."""
    return bool(url.password) or bool(secret_query_keys(url))


def hidden(url: URL) -> str:
    """``url`` as it may be shown, logged or stored: every credential replaced by ***."""
    secret = secret_query_keys(url)
    # A placeholder that needs no percent-encoding, so the rendered query shows a plain ***.
    placeholder = "0hidden0"
    shown = url.update_query_dict({key: placeholder for key in secret})
    return shown.render_as_string(hide_password=True).replace(f"={placeholder}", f"={HIDDEN}")


def redact(text: str) -> str:
    """``text`` (a message that may quote a URL) with every credential of a URL replaced by ***."""
    for pattern, replacement in _SECRET_IN_TEXT:
        text = pattern.sub(replacement, text)
    return text
