"""Fixtures: the loopback AWS server (see fakeaws.py) with fake credentials and fresh seed tables per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.preflight.fakeaws import CURRENT, FakeAws, fake_aws_server


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    with fake_aws_server() as url:
        yield url


def isolate_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """No profile, config file or instance metadata from the machine running the tests."""
    for var in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[FakeAws]:
    """Fake credentials and AWS_ENDPOINT_URL pointing at the loopback server; fresh seed tables per test."""
    isolate_aws_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    fake = FakeAws(moto_url)
    CURRENT.append(fake)
    yield fake
    CURRENT.remove(fake)
    fake.reset()
