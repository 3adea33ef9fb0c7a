#!/usr/bin/python3
"""redispy_lock.py -- the real redis-py Lock, driven line by line from a test
(tests/test_simple_redispy.c): the other side of the simple lock's interop.

Usage: redispy_lock.py PORT NAME
Commands on stdin, one answer line each on stdout:
  acquire WAIT_S TIMEOUT_S  Lock(NAME, timeout=TIMEOUT_S).acquire(blocking_timeout=WAIT_S)
                            -> "ok" | "busy"
  release                   -> "released" | "notowned" (LockNotOwnedError)
  owned                     -> "yes" | "no"
  token                     -> the token this Lock stored (hex)
  quit
"""
import sys

import redis
from redis.exceptions import LockNotOwnedError


def main():
    port, name = int(sys.argv[1]), sys.argv[2]
    r = redis.Redis(host="127.0.0.1", port=port)
    lock = None
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd = words[0]
        if cmd == "acquire":
            lock = r.lock(name, timeout=float(words[2]))
            got = lock.acquire(blocking=True, blocking_timeout=float(words[1]))
            out = "ok" if got else "busy"
        elif cmd == "release":
            try:
                lock.release()
                out = "released"
            except LockNotOwnedError:
                out = "notowned"
        elif cmd == "owned":
            out = "yes" if lock.owned() else "no"
        elif cmd == "token":
            out = lock.local.token.decode()
        elif cmd == "quit":
            return
        else:
            out = "unknown command"
        print(out, flush=True)


if __name__ == "__main__":
    main()
