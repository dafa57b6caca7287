#!/usr/bin/env python3
"""The API server's way to the nodes' kubelets (`kubectl logs`, `exec`, `port-forward`, node proxy).

kube-apiserver sends its "cluster" traffic (to kubelets, pods and services) through this HTTP
CONNECT proxy on a Unix socket (its --egress-selector-config-file, written by up.sh). Real nodes
are QEMU guests (tests/nodes) on user-mode networks: each guest's kubelet listens on a port of its
own that QEMU forwards from the host's loopback (tests/nodes/up.sh writes the port to
GUESTS/<node>/kubelet-port). So a CONNECT to any address on such a port goes to 127.0.0.1:<port>;
a CONNECT to a loopback address goes there unchanged; everything else is refused. The API server
so never sends a packet to a node's own address (10.0.2.15 in every guest, 10.244.0.1 for kwok's
fake nodes), which is not on this machine.

  egress-proxy.py --socket PATH --guests DIR
"""

import argparse
import asyncio
import os
import sys


def guest_ports(guests):
    ports = set()
    try:
        names = os.listdir(guests)
    except FileNotFoundError:
        return ports
    for name in names:
        try:
            with open(os.path.join(guests, name, "kubelet-port")) as f:
                ports.add(int(f.read().strip()))
        except (OSError, ValueError):
            pass
    return ports


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def handle(reader, writer, guests):
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(line) < 2 or line[0] != "CONNECT":
            raise ValueError(f"not a CONNECT request: {line!r}")
        host, _, port = line[1].rpartition(":")
        port = int(port)
        host = host.strip("[]")
        if host in ("localhost", "::1") or host.startswith("127."):
            target = (host if host != "localhost" else "127.0.0.1", port)
        elif port in guest_ports(guests):
            target = ("127.0.0.1", port)
        else:
            writer.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            await writer.drain()
            print(f"egress-proxy: refused {host}:{port} (no guest kubelet on that port)",
                  file=sys.stderr, flush=True)
            writer.close()
            return
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*target), 10)
    except Exception as e:  # a bad request or an unreachable guest: the API server gets a 502
        try:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            await writer.drain()
            writer.close()
        except Exception:
            pass
        print(f"egress-proxy: {e}", file=sys.stderr, flush=True)
        return
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await writer.drain()
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True)
    p.add_argument("--guests", required=True)
    args = p.parse_args()
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    server = await asyncio.start_unix_server(
        lambda r, w: handle(r, w, args.guests), path=args.socket)
    os.chmod(args.socket, 0o600)
    print(f"egress-proxy: listening on {args.socket}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
