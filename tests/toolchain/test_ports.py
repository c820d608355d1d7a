"""The ports the twin gives its components (`twin.processes.free_port`): a port is free when it is picked but
bound only once its component starts, so each must differ from every port picked before it, or two components
of one twin are given the same port and the second fails to bind."""

from __future__ import annotations

from twin.processes import LISTEN_PORTS, free_port


def test_no_port_is_handed_out_twice() -> None:
    # 1,000 picks from about 29,000 ports: picked at random alone, two would be the same almost surely
    picked = [free_port() for _ in range(1000)]
    assert len(set(picked)) == len(picked)
    assert all(LISTEN_PORTS[0] <= p <= LISTEN_PORTS[1] for p in picked)
