"""kafka-python warns "in the clear" at every SASL connection without TLS; partsync filters
that line (and warns once per cluster itself). Pinned here to kafka-python's logger names and
wording, so an upgrade that changes them fails a test instead of flooding every run's log."""

from __future__ import annotations

import inspect
import logging

import kafka.net.sasl.plain
import kafka.net.sasl.scram

import partsync._kafka.sasl_login  # noqa: F401  (installs the filters)


def test_kafka_pythons_per_connection_warning_is_filtered() -> None:
    for module in (kafka.net.sasl.plain, kafka.net.sasl.scram):
        assert "in the clear" in inspect.getsource(module)  # what kafka-python says
        assert module.log.name == module.__name__  # where it says it
        record = logging.LogRecord(
            module.__name__,
            logging.WARNING,
            "",
            0,
            "Exchanging credentials in the clear",
            None,
            None,
        )
        assert not module.log.filter(record)
        other = logging.LogRecord(module.__name__, logging.WARNING, "", 0, "other", None, None)
        assert module.log.filter(other)
