"""kafka-python's package ``__init__`` (its whole client) is not run by partsync's import, and
still runs, whole, for a program that asks the package for one of its names. Fresh interpreters:
which modules are loaded is the point."""

from __future__ import annotations

import subprocess
import sys

# kafka-python's client: what its package __init__ imports and partsync never needs.
_CLIENT = (
    "kafka.net",
    "kafka.admin",
    "kafka.consumer",
    "kafka.producer",
    "kafka.protocol.broker_version_data",
)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_cli_imports_no_part_of_kafka_pythons_client() -> None:
    out = _run(
        "import sys, partsync.ui.cli\n"
        f"print(sorted(m for m in sys.modules if m.startswith({_CLIENT!r})))"
    )
    assert out == "[]"


def test_a_program_importing_partsync_first_still_gets_the_whole_kafka_package() -> None:
    out = _run(
        "import partsync._kafka, kafka, kafka.errors\n"
        "from partsync._kafka.kafka_package import loaded\n"
        "before = loaded()\n"
        "from kafka import KafkaProducer, KafkaAdminClient, TopicPartition\n"
        "print(before, loaded(), KafkaProducer.__module__, kafka.__version__, kafka.__all__[0])"
    )
    assert out == "False True kafka.producer.kafka 3.0.12 KafkaAdminClient"


def test_an_unknown_name_is_an_attribute_error_after_the_package_ran() -> None:
    out = _run(
        "import partsync._kafka, kafka\n"
        "try:\n    kafka.NoSuchThing\nexcept AttributeError as e:\n    print(e)\n"
        "from partsync._kafka.kafka_package import loaded\nprint(loaded())"
    )
    assert out == "module 'kafka' has no attribute 'NoSuchThing'\nTrue"


def test_kafka_imported_before_partsync_is_left_alone() -> None:
    out = _run(
        "import kafka, partsync._kafka\n"
        "from partsync._kafka.kafka_package import loaded\nprint(loaded(), kafka.KafkaConsumer)"
    )
    assert out == "True <class 'kafka.consumer.group.KafkaConsumer'>"


def test_threads_using_the_package_first_at_once_all_wait_for_it() -> None:
    # The package's file runs in one of them for ~0.15 s: the others wait, as for an import.
    out = _run(
        "import threading, partsync._kafka, kafka\n"
        "errors = []\n"
        "def use(n):\n"
        "    try:\n"
        "        if n % 2:\n"
        "            kafka.KafkaConsumer\n"
        "        else:\n"
        "            from kafka import KafkaProducer\n"
        "    except Exception as e:\n"
        "        errors.append(repr(e))\n"
        "ts = [threading.Thread(target=use, args=(n,)) for n in range(6)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]\n"
        "print(errors, 'KafkaAdminClient' in dir(kafka))"
    )
    assert out == "[] True"
