#!/usr/bin/env python3
"""Generate holdfast's OVSDB schemas from its own table lists.

Source of truth: `ovn-nb.tables` and `ovn-sb.tables` in this directory (holdfast's list of the
tables and columns it serves). This script turns each into `<name>.ovsschema`, the file that
`holdfast db`, `ovsdb-tool` and hf-model's build script read. Never edit the .ovsschema files by
hand: edit the .tables file and run

    python3 schemas/gen.py            # rewrite both .ovsschema files
    python3 schemas/gen.py --check    # exit 1 if a .ovsschema file is out of date

Notation of a .tables file (one item per line, `#` starts a comment):

    database NAME X.Y.Z
    table NAME [root] [maxRows=N] [index(COL, COL...)]...
        COLUMN  TYPE [ephemeral] [immutable]

TYPE is one of
    BASE                      exactly one value
    opt(BASE)                 zero or one value
    set(BASE)                 any number of values
    set(BASE, MIN..MAX)       MIN (0 or 1) to MAX values (MAX empty: unlimited)
    map(BASE, BASE)           any number of key/value pairs
    map(BASE, BASE, MIN..MAX)
BASE is an atomic type (string, integer, real, boolean, uuid) with optional constraints:
    string{a, b, c}           enumeration
    integer[LO..HI]           range (either bound may be empty); for strings: length range
    ref TABLE / weakref TABLE a strong / weak reference (uuid with refTable)
"""

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ATOMIC = {"string", "integer", "real", "boolean", "uuid"}
RANGE_KEYS = {"integer": ("minInteger", "maxInteger"), "real": ("minReal", "maxReal"),
              "string": ("minLength", "maxLength")}


class Error(Exception):
    pass


def split_args(s):
    """Split on top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def number(text, atomic):
    return float(text) if atomic == "real" else int(text)


def base(s):
    s = s.strip()
    m = re.fullmatch(r"(ref|weakref)\s+([A-Za-z_][A-Za-z0-9_]*)", s)
    if m:
        b = {"type": "uuid", "refTable": m.group(2)}
        if m.group(1) == "weakref":
            b["refType"] = "weak"
        return b
    m = re.fullmatch(r"([a-z]+)\s*(\{[^}]*\})?\s*(\[[^\]]*\])?", s)
    if not m or m.group(1) not in ATOMIC:
        raise Error(f"bad base type {s!r}")
    atomic, enum, rng = m.groups()
    if not enum and not rng:
        return atomic
    b = {"type": atomic}
    if enum:
        vals = [v.strip() for v in enum[1:-1].split(",")]
        vals = [number(v, atomic) if atomic in ("integer", "real") else v for v in vals]
        b["enum"] = ["set", vals]
    if rng:
        if atomic not in RANGE_KEYS:
            raise Error(f"range on {atomic}")
        lo, _, hi = rng[1:-1].partition("..")
        kmin, kmax = RANGE_KEYS[atomic]
        if lo.strip():
            b[kmin] = number(lo.strip(), atomic)
        if hi.strip():
            b[kmax] = number(hi.strip(), atomic)
    return b


def bounds(s):
    lo, _, hi = s.partition("..")
    return int(lo), (int(hi) if hi.strip() else "unlimited")


def column_type(s):
    s = s.strip()
    m = re.fullmatch(r"(opt|set|map)\((.*)\)", s)
    if not m:
        b = base(s)
        return b if isinstance(b, str) else {"key": b}
    kind, args = m.group(1), split_args(m.group(2))
    if kind == "opt" and len(args) == 1:
        return {"key": base(args[0]), "min": 0, "max": 1}
    if kind == "set" and len(args) in (1, 2):
        mn, mx = bounds(args[1]) if len(args) == 2 else (0, "unlimited")
        return {"key": base(args[0]), "min": mn, "max": mx}
    if kind == "map" and len(args) in (2, 3):
        mn, mx = bounds(args[2]) if len(args) == 3 else (0, "unlimited")
        return {"key": base(args[0]), "value": base(args[1]), "min": mn, "max": mx}
    raise Error(f"bad column type {s!r}")


def parse(path):
    name = version = None
    tables = {}
    table = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        try:
            if line.startswith("database "):
                _, name, version = line.split()
            elif line.startswith("table "):
                head = line[len("table "):]
                tname, _, rest = head.strip().partition(" ")
                table = {"columns": {}}
                for ix in re.findall(r"index\(([^)]*)\)", rest):
                    table.setdefault("indexes", []).append([c.strip() for c in ix.split(",")])
                rest = re.sub(r"index\([^)]*\)", "", rest)
                for flag in rest.split():
                    if flag == "root":
                        table["isRoot"] = True
                    elif flag.startswith("maxRows="):
                        table["maxRows"] = int(flag.split("=", 1)[1])
                    else:
                        raise Error(f"unknown table flag {flag!r}")
                if tname in tables:
                    raise Error(f"table {tname} defined twice")
                tables[tname] = table
            elif raw.startswith((" ", "\t")) and table is not None:
                cname, rest = line.strip().split(None, 1)
                flags = {}
                for flag in ("ephemeral", "immutable"):
                    if rest.endswith(" " + flag):
                        rest = rest[: -len(flag) - 1]
                        flags["ephemeral" if flag == "ephemeral" else "mutable"] = (
                            flag == "ephemeral")
                col = {"type": column_type(rest)}
                col.update(flags)
                if cname in table["columns"]:
                    raise Error(f"column {cname} defined twice")
                table["columns"][cname] = col
            else:
                raise Error("expected 'database', 'table' or an indented column")
        except (Error, ValueError) as e:
            raise SystemExit(f"{path}:{n}: {e}")
    if not name or not version:
        raise SystemExit(f"{path}: missing 'database NAME VERSION' line")
    return name, version, tables


def render(name, version, tables):
    """Our layout: one column per line, its type as compact JSON. (ovsdb-server and ovsdb-tool
    reject a top-level "doc" member, so the "generated from" note lives in README.md.)"""
    dump = lambda v: json.dumps(v, separators=(", ", ": "))
    out = ["{",
           f'  "name": {dump(name)},',
           f'  "version": {dump(version)},',
           '  "tables": {']
    tnames = list(tables)
    for ti, tname in enumerate(tnames):
        t = tables[tname]
        out.append(f"    {dump(tname)}: {{")
        out.append('      "columns": {')
        cols = list(t["columns"].items())
        for ci, (cname, col) in enumerate(cols):
            sep = "," if ci + 1 < len(cols) else ""
            out.append(f"        {dump(cname)}: {dump(col)}{sep}")
        extra = [(k, t[k]) for k in ("isRoot", "maxRows", "indexes") if k in t]
        out.append("      }" + ("," if extra else ""))
        for ki, (k, v) in enumerate(extra):
            sep = "," if ki + 1 < len(extra) else ""
            out.append(f"      {dump(k)}: {dump(v)}{sep}")
        out.append("    }" + ("," if ti + 1 < len(tnames) else ""))
    out += ["  }", "}", ""]
    return "\n".join(out)


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for src in sorted(HERE.glob("*.tables")):
        name, version, tables = parse(src)
        text = render(name, version, tables)
        json.loads(text)  # the output must be valid JSON
        dst = src.with_suffix(".ovsschema")
        if check:
            if not dst.exists() or dst.read_text() != text:
                stale.append(dst.name)
        else:
            dst.write_text(text)
            print(f"wrote {dst.relative_to(HERE.parent)}")
    if stale:
        print("out of date (run python3 schemas/gen.py): " + ", ".join(stale), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
