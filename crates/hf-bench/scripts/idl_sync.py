#!/usr/bin/python3
"""Initial sync of every table of one database with OVS's Python IDL (python3-openvswitch).

Usage: idl_sync.py REMOTE SCHEMA_FILE {time|memory}
Prints one JSON object: seconds, rows, and with `memory` the tracemalloc peak in bytes
(tracemalloc slows the IDL down, so time and memory are measured in separate runs).
"""
import json
import sys
import time
import tracemalloc

import ovs.db.idl
import ovs.poller

remote, schema, mode = sys.argv[1:4]
if mode == "memory":
    tracemalloc.start()


def rss_bytes():
    # VmRSS, not ru_maxrss: the latter survives exec, so a child of a big process inherits it.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


rss0 = rss_bytes()
t0 = time.perf_counter()
helper = ovs.db.idl.SchemaHelper(location=schema)
helper.register_all()
idl = ovs.db.idl.Idl(remote, helper, leader_only=False)
while not idl.has_ever_connected():
    idl.run()
    if idl.has_ever_connected():
        break
    poller = ovs.poller.Poller()
    idl.wait(poller)
    poller.block()
seconds = time.perf_counter() - t0
rows = sum(len(t.rows) for t in idl.tables.values())
out = {"seconds": seconds, "rows": rows,
       "rss_growth_bytes": rss_bytes() - rss0}
if mode == "memory":
    out["tracemalloc_peak_bytes"] = tracemalloc.get_traced_memory()[1]
print(json.dumps(out))
