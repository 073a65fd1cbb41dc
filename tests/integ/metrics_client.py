#!/usr/bin/env python3
"""The client side of tests/integ/metrics.sh: fetch a rank's /metrics, attack it, query
Prometheus. Standard library only; every network call has a timeout.

  metrics_client.py ports N              a base port with N free ports after it (loopback)
  metrics_client.py wait PORT...         until each serves GET /metrics (10 s at most)
  metrics_client.py get PORT FILE        GET /metrics into FILE; fails unless a whole 200
  metrics_client.py flood SECONDS DIR PORT...
        1000 idle connections, garbage, half and over-long requests against the ports, while
        a proper GET to each port every 0.2 s must get its whole 200; then one last GET of
        each port's text into DIR/flood-PORT.txt
  metrics_client.py prom-ready PORT      until Prometheus answers /-/ready (20 s at most)
  metrics_client.py prom-scraping PORT N  until Prometheus has scraped N targets (they may be
                                         down): its discovery hands targets over ~5 s after start
  metrics_client.py query PORT EXPR      Prometheus instant query: "instance value" lines
"""
import json
import os
import random
import resource
import socket
import sys
import time
import urllib.parse
import urllib.request

HOST = "127.0.0.1"


def get(port, timeout=2.0):
    """A whole GET /metrics: (status, content type, body). Reads to EOF and checks the length."""
    s = socket.create_connection((HOST, port), timeout=timeout)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n")
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/1.1 ") else 0
    hdr = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdr[k.strip().lower()] = v.strip()
    if int(hdr.get("content-length", "-1")) != len(body):
        raise RuntimeError(f"port {port}: body of {len(body)} bytes, Content-Length "
                           f"{hdr.get('content-length')}")
    return status, hdr.get("content-type", ""), body


def cmd_ports(n):
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, p))
            print(base)
            return 0
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    print("no free ports", file=sys.stderr)
    return 1


def cmd_wait(ports):
    deadline = time.monotonic() + 10
    for p in ports:
        while True:
            try:
                if get(p, 1.0)[0] == 200:
                    break
            except (OSError, RuntimeError):
                pass
            if time.monotonic() > deadline:
                print(f"port {p}: no /metrics within 10 s", file=sys.stderr)
                return 1
            time.sleep(0.1)
    return 0


def cmd_get(port, path):
    status, ctype, body = get(port)
    if status != 200 or ctype != "text/plain; version=0.0.4; charset=utf-8":
        print(f"port {port}: status {status}, type {ctype!r}", file=sys.stderr)
        return 1
    with open(path, "wb") as f:
        f.write(body)
    return 0


def connect_quiet(port):
    """A connection, or None when the kernel refuses one more (backlog full: fine)."""
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect((HOST, port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return None
    return s


def cmd_flood(seconds, out_dir, ports):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = []
    # 1000 idle connections, spread over the ports
    for i in range(1000):
        s = connect_quiet(ports[i % len(ports)])
        if s is not None:
            held.append(s)
    idle = len(held)
    if idle < 1000:  # the kernel took every one: keel must accept them, not stall
        print(f"flood: only {idle} of 1000 idle connections were accepted", file=sys.stderr)
        return 1
    rng = random.Random(17)
    attacks = {"garbage": 0, "half": 0, "long": 0}
    ok = 0
    worst = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for p in ports:
            # garbage, half a request (then silence), a head longer than any buffer
            for kind, payload in (("garbage", bytes(rng.getrandbits(8) for _ in range(300))),
                                  ("half", b"GET /metr"),
                                  ("long", b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 8000)):
                s = connect_quiet(p)
                if s is None:
                    continue
                try:
                    s.send(payload)
                except OSError:
                    pass
                held.append(s)
                attacks[kind] += 1
            t0 = time.monotonic()
            try:
                status, _, body = get(p)
            except (OSError, RuntimeError) as e:
                print(f"port {p}: GET during the flood failed: {e}", file=sys.stderr)
                return 1
            worst = max(worst, time.monotonic() - t0)
            if status != 200 or not body.endswith(b"\n") or b"keel_view_epoch" not in body:
                print(f"port {p}: GET during the flood got {status}, {len(body)} bytes",
                      file=sys.stderr)
                return 1
            ok += 1
        # the half requests and idle ones stay open; drop the oldest few to bound our fds
        while len(held) > 1500:
            held.pop(0).close()
        time.sleep(0.2)
    for s in held:
        s.close()
    for p in ports:
        if cmd_get(p, os.path.join(out_dir, f"flood-{p}.txt")) != 0:
            return 1
    print(f"flood: {len(ports)} ports, {idle} idle connections, {attacks['garbage']} garbage, "
          f"{attacks['half']} half and {attacks['long']} over-long requests; {ok} GETs "
          f"answered whole during it (slowest {worst * 1000:.1f} ms)")
    return 0


def prom(port, path, timeout=3.0):
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=timeout) as r:
        return r.read()


def cmd_prom_ready(port):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            prom(port, "/-/ready", 1.0)
            return 0
        except OSError:
            time.sleep(0.2)
    print(f"prometheus on port {port} not ready within 20 s", file=sys.stderr)
    return 1


def cmd_prom_scraping(port, n):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            t = json.loads(prom(port, "/api/v1/targets?state=active", 1.0))
            tried = [a for a in t["data"]["activeTargets"] if a.get("health") != "unknown"]
            if len(tried) >= n:
                return 0
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    print(f"prometheus on port {port} did not scrape {n} targets within 30 s", file=sys.stderr)
    return 1


def cmd_query(port, expr):
    out = json.loads(prom(port, "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    if out.get("status") != "success":
        print(f"query {expr!r}: {out}", file=sys.stderr)
        return 1
    for r in out["data"]["result"]:
        print(r["metric"].get("instance", "-"), r["value"][1])
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "ports":
        return cmd_ports(int(args[0]))
    if cmd == "wait":
        return cmd_wait([int(a) for a in args])
    if cmd == "get":
        return cmd_get(int(args[0]), args[1])
    if cmd == "flood":
        return cmd_flood(float(args[0]), args[1], [int(a) for a in args[2:]])
    if cmd == "prom-ready":
        return cmd_prom_ready(int(args[0]))
    if cmd == "prom-scraping":
        return cmd_prom_scraping(int(args[0]), int(args[1]))
    if cmd == "query":
        return cmd_query(int(args[0]), args[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main(sys.argv))
