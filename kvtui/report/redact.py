"""Compatibility shim: secrets handling lives in `kvtui.secrets` (one module, low in the tree)."""

from kvtui.secrets import REDACTED, Redactor, _SECRET_NAME, is_secret_env, redact_args, redact_scenario  # noqa: F401
