"""Kafka message specs that kafka-python 3.0.x does not ship (loaded by its JSON schema loader)."""
