"""Deploy tests reuse the loopback AWS server from the preflight tests."""

from tests.preflight.conftest import aws, moto_url  # noqa: F401
