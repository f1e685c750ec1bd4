"""partsync: keep Kafka topic partitions offset-identical across clusters."""

__version__ = "0.1.0"
