"""Compatibility shim: secrets handling lives in `kvtui.secrets` (one module, low in the tree)."""

from kvtui.secrets import _SECRET_NAME, REDACTED, Redactor, is_secret_env, redact_args, redact_scenario  # noqa: F401
