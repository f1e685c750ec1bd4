"""Talking to clusters: connected clusters and their pool, the one batch reader, the shared
writer, local group membership and the follow-mode tail. Built on the ``_kafka`` adapter."""
