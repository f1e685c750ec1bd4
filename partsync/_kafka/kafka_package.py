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
    # Held while the file runs: another thread asking meanwhile waits for it, as it would for
    # an import; the running thread itself (the file imports its own submodules) goes on.
    lock = threading.RLock()
    running = False

    def load(attr: str) -> object:
        nonlocal running
        with lock:
            if not running and package.__dict__.get("__getattr__") is load:
                if "__all__" not in package.__dict__:  # not run yet (importlib.reload runs it)
                    running = True
                    try:
                        assert spec.loader is not None
                        spec.loader.exec_module(package)
                    except BaseException:
                        sys.modules.pop(name, None)  # half run: the next import starts afresh
                        raise
                    finally:
                        running = False
                del package.__dict__["__getattr__"]
                package.__dict__.pop("__dir__", None)
        try:
            return package.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    def listing() -> list[str]:
        load("__name__")
        return sorted(package.__dict__)

    package.__getattr__ = load  # type: ignore[method-assign]  # PEP 562
    package.__dir__ = listing  # type: ignore[method-assign]
    sys.modules[name] = package


def loaded(name: str = "kafka") -> bool:
    """Whether the package's ``__init__`` has run (for tests)."""
    module: ModuleType | None = sys.modules.get(name)
    return module is not None and "__getattr__" not in module.__dict__
