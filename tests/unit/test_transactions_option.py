"""``sync --transactions``: replay by default, except where a replay is not supported yet, which
keeps refusing as before the option existed (users' command lines keep their meaning)."""

from __future__ import annotations

import pytest

from partsync.errors import UsageError
from partsync.ui.cli_sync import _transactions


def test_replay_is_the_default() -> None:
    assert _transactions(None, "refuse", True) == "replay"


@pytest.mark.parametrize(("holes", "fencing"), [("fill", True), ("refuse", False)])
def test_unsupported_combinations_keep_refusing_unless_asked(holes: str, fencing: bool) -> None:
    assert _transactions(None, holes, fencing) == "refuse"
    assert _transactions("refuse", holes, fencing) == "refuse"
    with pytest.raises(UsageError, match="--transactions replay"):
        _transactions("replay", holes, fencing)
