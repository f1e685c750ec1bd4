"""Bytes: record batches, records and digests. Pure (stdlib, crc32c and the codecs); no sockets."""
