"""A mapping that remembers which keys were read: a CLI dataclass's test checks that every
click option reaches it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class Recording(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self.data, self.read = data, set[str]()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)
