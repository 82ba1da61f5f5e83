"""Reading the audit configuration: the TOML file (``BIASAUDIT_CONFIG``, else ``biasaudit.toml``),
parsed and validated by schemas.config, one audit at a time or all at once."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from biasaudit.schemas.config import Audit, AuditFile, ConfigError, parse_config

CONFIG_ENV = "BIASAUDIT_CONFIG"


def read_config(path: str | Path) -> dict[str, Any]:
    """The parsed TOML document, or ConfigError: missing, unreadable, undecodable, invalid TOML."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"configuration file {path} is a directory") from None
    except PermissionError:
        raise ConfigError(f"configuration file {path} is not readable") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None


def load_config(path: str | Path) -> AuditFile:
    """Read and validate a TOML audit configuration file."""
    return parse_config(read_config(path), str(path))


def default_config_path() -> str:
    """The configuration file: ``BIASAUDIT_CONFIG``, else ``biasaudit.toml`` here."""
    return os.environ.get(CONFIG_ENV, "biasaudit.toml")


def configured_names(path: str | Path) -> list[str]:
    """The names of the file's ``[[audits]]``, without validating them (each audit is validated
    on its own by ``load_audit``, so one bad audit does not stop the others)."""
    data = read_config(path)
    audits = data.get("audits")
    if not isinstance(audits, list) or not audits:
        raise ConfigError(f"{path}: no [[audits]] configured")
    return [
        str(entry.get("name")) if isinstance(entry, dict) else f"audits[{i}]"
        for i, entry in enumerate(audits)
    ]


def load_audit(path: str | Path, name: str) -> Audit:
    """The audit ``name`` of the file, validated alone: errors in other audits do not matter."""
    data = read_config(path)
    audits = data.get("audits")
    entries = [
        a for a in (audits if isinstance(audits, list) else []) if isinstance(a, dict)
    ]
    chosen = [a for a in entries if a.get("name") == name]
    if not chosen:
        names = [a.get("name") for a in entries]
        raise ConfigError(f"no audit named {name!r}; configured: {names}")
    if len(chosen) > 1:
        raise ConfigError(f"audit names must be unique; repeated: [{name!r}]")
    return parse_config({**data, "audits": chosen}, f"{path} (audit {name!r})").audits[0]
