"""Request and response classes kafka-python 3.0.x does not ship, built by its own loader from
Kafka's JSON message specs (vendored in ``schemas``)."""

from kafka.protocol.api_message import ApiMessage

__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
]

_SPECS = "partsync._kafka.schemas"  # a package name: importlib.resources reads it


# KIP-848's group heartbeat (a preview in Kafka 3.9, on by default from 4.0).
class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_SPECS):  # type: ignore[misc,call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_SPECS):  # type: ignore[misc,call-arg]
    pass


# Each member's current and target assignment: a member knows it has everything it will get.
class ConsumerGroupDescribeRequest(ApiMessage, load_json=_SPECS):  # type: ignore[misc,call-arg]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_SPECS):  # type: ignore[misc,call-arg]
    pass
