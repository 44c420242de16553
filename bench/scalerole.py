"""The stand-in role of bench/scale.py: as cheap as a Python process can be (run it with
``python -I -S``; it imports only ``os``, ``socket`` and ``time``), and as idle as a
blocked ps-lite role.

scheduler: listens on DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT (SO_REUSEADDR, as zmq) and
           keeps every connection it accepts, until it is stopped.
server, worker: connect to the scheduler (retrying every 0.1 s until it listens, as
           ps-lite's van does), keep the connection and block on it: they exit 0 when
           told, i.e. when the scheduler closes it or is gone (EOF), or on SIGTERM.
"""

import os
import socket
import time

ADDRESS = (os.environ["DMLC_PS_ROOT_URI"], int(os.environ["DMLC_PS_ROOT_PORT"]))

if os.environ["DMLC_ROLE"] == "scheduler":
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(ADDRESS)
    listener.listen(4096)
    held = []
    while True:
        held.append(listener.accept()[0])
else:
    while True:
        try:
            connection = socket.create_connection(ADDRESS, timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    connection.settimeout(None)
    while connection.recv(64):
        pass
