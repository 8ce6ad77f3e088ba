#!/usr/bin/env python3
"""Capture relay for the fuzz corpus: listen on a unix socket, forward every connection to
another unix socket, and record each direction of connection N to OUTDIR/N.c2s and N.s2c.
Usage: relay.py LISTEN UPSTREAM OUTDIR   (runs until killed)"""
import os
import selectors
import socket
import sys


def main():
    listen, upstream, outdir = sys.argv[1:4]
    os.makedirs(outdir, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(listen)
    srv.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, None)
    n = 0
    ended = {}
    while True:
        for key, _ in sel.select():
            if key.data is None:
                c, _ = srv.accept()
                u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                u.connect(upstream)
                n += 1
                c2s = open(os.path.join(outdir, "%03d.c2s" % n), "wb")
                s2c = open(os.path.join(outdir, "%03d.s2c" % n), "wb")
                sel.register(c, selectors.EVENT_READ, (u, c2s))
                sel.register(u, selectors.EVENT_READ, (c, s2c))
                continue
            src, (dst, rec) = key.fileobj, key.data
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if data:
                rec.write(data)
                rec.flush()
                try:
                    dst.sendall(data)
                except OSError:
                    pass
                continue
            sel.unregister(src)
            rec.close()
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            ended[src] = True
            if ended.get(dst):
                src.close()
                dst.close()


if __name__ == "__main__":
    main()
