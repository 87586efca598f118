#!/usr/bin/env python3
"""A chart repository that takes only clients with a certificate its CA
signed: the files of DIRECTORY over HTTPS on 127.0.0.1, with the Python
standard library's TLS (a real TLS server, not a stand-in).

    mtls_repository.py DIRECTORY CERT KEY CLIENT_CA

Prints the port it listens on, then serves until killed.
"""

import functools
import http.server
import ssl
import sys

directory, cert, key, client_ca = sys.argv[1:5]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
handler.log_message = lambda *args: None
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
context.load_verify_locations(client_ca)
context.verify_mode = ssl.CERT_REQUIRED
# TLS 1.2: the client learns that its certificate is missing during the
# handshake (an alert), not as a reset on its first write afterwards, as
# TLS 1.3's late client authentication may show it.
context.maximum_version = ssl.TLSVersion.TLSv1_2
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
