"""kafka-python's package ``__init__`` run on first use, not at import.

``import kafka.errors`` runs ``kafka/__init__.py`` first, which imports kafka-python's whole
client (admin, consumer, producer, network): about 0.15 s of every partsync run's start-up, for
classes partsync never uses (it imports ``kafka.protocol.*`` and ``kafka.errors`` only). Here
``kafka`` is registered as its package without running that file; the file runs, once, the
first time anything asks the package for a name it does not hold yet (``from kafka import
KafkaProducer`` in a program that also imports partsync gets exactly what it would have).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

__all__ = ["defer_init", "loaded"]


def defer_init(name: str = "kafka") -> None:
    """Register package ``name`` with its ``__init__`` deferred; nothing if it is imported
    already (or cannot be found: the import that needs it then fails as usual)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    package = importlib.util.module_from_spec(spec)
    lock = threading.RLock()

    def load(attr: str) -> object:
        with lock:
            if package.__dict__.get("__getattr__") is load:
                del package.__dict__["__getattr__"]
                assert spec.loader is not None
                spec.loader.exec_module(package)
        try:
            return package.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    package.__getattr__ = load  # type: ignore[method-assign]  # PEP 562
    sys.modules[name] = package


def loaded(name: str = "kafka") -> bool:
    """Whether the package's ``__init__`` has run (for tests)."""
    module: ModuleType | None = sys.modules.get(name)
    return module is not None and "__getattr__" not in module.__dict__
