"""Fixtures: the loopback AWS server (see fakeaws.py) with fake credentials and fresh seed tables per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.preflight.fakeaws import CURRENT, FakeAws, fake_aws_server


@pytest.fixture(autouse=True)
def no_public_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Preflight's image check (infra.preflight.images) never reaches a public registry from the tests: every
    registry the stacks name points at a closed loopback port (tests that check images set their own)."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("GPUFLEET_REGISTRY_MIRRORS", f"ghcr.io={closed},registry.k8s.io={closed}")


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


DEPLOYER = "203.0.113.7"  # inside example-prod's publicCidrs (203.0.113.0/24)


def fake_aws_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """An `aws` executable on PATH, as on a machine with the AWS CLI installed (preflight only looks it up)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cli = bin_dir / "aws"
    cli.write_text("#!/bin/sh\necho 'aws-cli/2.0.0 Python/3'\n")
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[FakeAws]:
    """Fake credentials and AWS_ENDPOINT_URL pointing at the loopback server; fresh seed tables per test.

    The deployer's address is stated (no network here) and the `aws` CLI is on PATH, as on a prepared laptop.
    """
    isolate_aws_env(monkeypatch, tmp_path)
    fake_aws_cli(monkeypatch, tmp_path)
    monkeypatch.setenv("GPUFLEET_DEPLOYER_ADDRESS", DEPLOYER)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    fake = FakeAws(moto_url)
    CURRENT.append(fake)
    yield fake
    CURRENT.remove(fake)
    fake.reset()
