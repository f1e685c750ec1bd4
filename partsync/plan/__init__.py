"""Decisions over plain data: the comparator, topic rules, diff and sync result models, group
assignment and partition selection. Pure: no sockets, no Kafka client."""
