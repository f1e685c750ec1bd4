"""``sync --transactions``: replay by default, except without fencing, which a replay needs:
that keeps refusing as before the option existed (users' command lines keep their meaning)."""

from __future__ import annotations

import pytest

from partsync.errors import UsageError
from partsync.ui.sync_args import _transactions


def test_replay_is_the_default() -> None:
    assert _transactions(None, True) == "replay"
    assert _transactions("refuse", True) == "refuse"


def test_without_fencing_transactions_keep_being_refused_unless_a_replay_is_asked_for() -> None:
    assert _transactions(None, False) == "refuse"
    assert _transactions("refuse", False) == "refuse"
    with pytest.raises(UsageError, match="--transactions replay needs fencing"):
        _transactions("replay", False)
