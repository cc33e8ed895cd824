"""Fixtures for the reliability tests; the helpers live in reliability_helpers.py.

Test modules import helpers from reliability_helpers, never from "conftest": every test
directory has a conftest and, under pytest's default import mode, the name "conftest"
points at whichever was collected last (an import inside a test body got tests/vllm's).
"""
from reliability_helpers import fault_server_factory, knee_path, liar, runs  # noqa: F401  (pytest fixtures)
