"""TLS contexts are built once per cluster settings, and again when a file they load changed."""

from __future__ import annotations

import os
from pathlib import Path

from partsync._kafka.sockets import ssl_context
from partsync.config import Security
from tests.support.tls import TestCA


def test_connections_share_a_context_until_a_certificate_file_is_replaced(tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "ca")
    client = ca.issue("client", client=True)
    sec = Security(
        "SSL", ssl_cafile=str(ca.cert), ssl_certfile=str(client.cert), ssl_keyfile=str(client.key)
    )
    first = ssl_context(sec)
    first_mtime = client.cert.stat().st_mtime_ns
    assert ssl_context(sec) is first
    # A rotated certificate: the file is replaced (new contents, new mtime).
    rotated = ca.issue("client-next", client=True)
    os.replace(rotated.cert, client.cert)
    os.replace(rotated.key, client.key)
    st = client.cert.stat()
    os.utime(client.cert, ns=(st.st_atime_ns, first_mtime))  # as `cp -p` would keep it
    again = ssl_context(sec)
    assert again is not first
    assert ssl_context(sec) is again
    other = Security("SSL", ssl_cafile=str(ca.cert), ssl_check_hostname=False)
    assert ssl_context(other) is not again
