"""Free ports for test brokers: parallel test workers take ports from ranges of their own."""

from __future__ import annotations

import socket

import pytest

from partsync.demo.brokers import _SLICED_LOW, BrokerStartError, _ephemeral_low, free_ports


def test_without_a_slice_the_kernel_chooses_distinct_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PARTSYNC_PORT_SLICE", raising=False)
    ports = free_ports(8)
    assert len(set(ports)) == 8


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_a_slice_gives_distinct_ports_from_its_own_range_below_the_ephemeral_one(
    monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    monkeypatch.setenv("PARTSYNC_PORT_SLICE", f"{index}/4")
    span = (_ephemeral_low() - _SLICED_LOW) // 4
    low = _SLICED_LOW + index * span
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(low <= p < low + span for p in ports), ports
    assert all(p < _ephemeral_low() for p in ports)


def test_a_port_in_use_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice whose only port is held by a socket has no port to give: a clear error."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    try:
        port = busy.getsockname()[1]
        monkeypatch.setenv("PARTSYNC_PORT_SLICE", "0/1")
        monkeypatch.setattr("partsync.demo.brokers._SLICED_LOW", port)
        monkeypatch.setattr("partsync.demo.brokers._ephemeral_low", lambda: port + 1)
        with pytest.raises(BrokerStartError, match="no free port on 127.0.0.1 in the range"):
            free_ports(1)
    finally:
        busy.close()
