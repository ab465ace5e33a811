"""Bytes that each device receives through the collectives of an XLA HLO module.

Reads the text of an HLO module (``jax.jit(f).lower(x).compile().as_text()``,
an HLO dump, or a hand-written module) and lists its collective instructions
with the bytes ONE device receives through each:

    op                      bytes received by one device
    all-gather              output bytes - input bytes
    all-to-all              input bytes * (k-1)/k   (tuple form: sum of operands)
    collective-permute      input bytes             (also for devices left out of the pairs;
                                                     0 when every pair is a self-pair {i,i})
    all-reduce              input bytes             (marked approx: a ring moves 2(k-1)/k)
    reduce-scatter          output bytes * (k-1)    (each peer's partial of this device's chunk)
    ragged-all-to-all       output-buffer bytes     (marked approx: an upper bound; the real
                                                     amount depends on the size operands)
    collective-broadcast    input bytes

``k`` is the size of the replica group, read from ``replica_groups`` in any of
the three forms XLA prints: explicit lists ``{{0,1},{2,3}}``, iota
``[2,4]<=[8]`` / ``[2,4]<=[4,2]T(1,0)``, and the mesh form
``mesh['axis_0'=2,'axis_1'=4], device_ids=(...) {'axis_1'}`` (sub-axes
``{'axis_1':(2)2}`` count their own size). An empty list ``{}`` means all
devices (``num_partitions``, else ``replica_count``, from the module header).

Async pairs ``X-start``/``X-done`` count once, at the start. Collectives
wrapped by ``async-start`` live in their own computation and are counted there.
A collective inside a loop body is counted once (this is a static count).

Operands are found by name: a map from every instruction's name to its shape is
built first, so operands printed as bare names (``all-gather(wrapped_copy)``),
with a percent sign (``%wrapped_copy``) or with a type prefix
(``f32[8]{0} %wrapped_copy``) all resolve.

API:
    collectives(hlo_text) -> list of dicts with keys
        op, name, bytes, group_size, in_bytes, out_bytes, approx
    recv_bytes(hlo_text, all_reduce="input") -> int   (sum of ``bytes`` over collectives(hlo_text);
                                  all_reduce="ring" prices an all-reduce as a ring moves it)
"""
from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["collectives", "recv_bytes", "shape_bytes", "parse_instructions", "COLLECTIVE_OPS"]

COLLECTIVE_OPS = (
    "all-gather",
    "all-to-all",
    "collective-permute",
    "all-reduce",
    "reduce-scatter",
    "ragged-all-to-all",
    "collective-broadcast",
)

_ELEMENT_BYTES = {
    "pred": Fraction(1), "s8": Fraction(1), "u8": Fraction(1),
    "s16": Fraction(2), "u16": Fraction(2), "f16": Fraction(2), "bf16": Fraction(2),
    "s32": Fraction(4), "u32": Fraction(4), "f32": Fraction(4),
    "s64": Fraction(8), "u64": Fraction(8), "f64": Fraction(8), "c64": Fraction(8),
    "c128": Fraction(16),
    "s4": Fraction(1, 2), "u4": Fraction(1, 2), "s2": Fraction(1, 4), "u2": Fraction(1, 4),
    "s1": Fraction(1, 8), "u1": Fraction(1, 8),
    "token": Fraction(0), "opaque": Fraction(0),
}


def _element_bytes(ty: str) -> Fraction:
    if ty in _ELEMENT_BYTES:
        return _ELEMENT_BYTES[ty]
    if ty.startswith("f8"):
        return Fraction(1)
    if ty.startswith("f4"):
        return Fraction(1, 2)
    if ty.startswith("f6"):
        return Fraction(3, 4)
    raise ValueError("unknown HLO element type %r" % ty)


_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([A-Za-z_][\w.\-]*)\s*=\s*(.*)$")


def _match_close(text: str, i: int) -> int:
    """Index just past the bracket group opening at text[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    j = i
    while j < len(text):
        c = text[j]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                raise ValueError("unbalanced brackets in %r" % text)
            if not stack:
                return j + 1
        elif c == '"':
            j = text.index('"', j + 1)
        j += 1
    raise ValueError("unbalanced brackets in %r" % text)


def _split_top(text: str, sep: str = ",") -> list[str]:
    out, depth, cur = [], 0, []
    in_str = False
    for c in text:
        if in_str:
            cur.append(c)
            if c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if cur or out:
        out.append("".join(cur))
    return [s.strip() for s in out]


def _parse_shape(text: str):
    """Parse a shape at the start of text. Returns (shape, rest).

    shape is ("array", type, dims) or ("tuple", [shapes])."""
    text = text.lstrip()
    if text.startswith("("):
        end = _match_close(text, 0)
        inner = text[1:end - 1]
        elems = [_parse_shape(p)[0] for p in _split_top(inner) if p]
        return ("tuple", elems), text[end:]
    m = _ARRAY.match(text)
    if not m:
        raise ValueError("cannot read a shape at %r" % text[:40])
    ty = m.group(1)
    dims = []
    for d in m.group(2).split(","):
        d = d.strip()
        if not d:
            continue
        d = d.lstrip("<=")
        dims.append(int(d) if d not in ("?",) else 0)
    rest = text[m.end():]
    if rest.startswith("{"):  # layout
        rest = rest[_match_close(rest, 0):]
    return ("array", ty, tuple(dims)), rest


def shape_bytes(shape) -> Fraction:
    if shape[0] == "tuple":
        return sum((shape_bytes(s) for s in shape[1]), Fraction(0))
    _, ty, dims = shape
    n = 1
    for d in dims:
        n *= d
    return _element_bytes(ty) * n


def parse_instructions(hlo_text: str) -> list[dict]:
    """Every instruction line: dicts with name, shape, op, operands (names), attrs (text)."""
    out = []
    for raw in hlo_text.splitlines():
        line = _COMMENT.sub("", raw)
        m = _INSTR.match(line)
        if not m:
            continue
        name, rest = m.group(1), m.group(2)
        try:
            shape, rest = _parse_shape(rest)
        except ValueError:
            continue
        om = re.match(r"\s*([a-z][\w\-]*)\s*\(", rest)
        if not om:
            continue
        op = om.group(1)
        start = om.end() - 1
        end = _match_close(rest, start)
        operands = []
        for o in _split_top(rest[start + 1:end - 1]):
            if not o:
                continue
            tok = o.split()[-1]  # drop a type prefix "f32[8]{0} %x"
            operands.append(tok.lstrip("%"))
        out.append({"name": name, "shape": shape, "op": op, "operands": operands,
                    "attrs": rest[end:]})
    return out


def _attr(attrs: str, key: str):
    """The text of attribute key=... (a bracket group or a bare token), or None."""
    m = re.search(r"(?:^|[\s,])" + re.escape(key) + r"=", attrs)
    if not m:
        return None
    i = m.end()
    if i < len(attrs) and attrs[i] in "{[(":
        return attrs[i:_match_close(attrs, i)]
    if attrs.startswith("mesh[", i):
        return attrs[i:]  # the mesh form runs on; _group_size reads what it needs
    j = i
    while j < len(attrs) and attrs[j] not in ", ":
        j += 1
    return attrs[i:j]


def _header_devices(hlo_text: str):
    m = re.search(r"^HloModule\b[^\n]*", hlo_text, re.M)
    if m:
        header = m.group(0)
        for key in ("num_partitions", "replica_count"):
            k = re.search(key + r"=(\d+)", header)
            if k and int(k.group(1)) > 1:
                return int(k.group(1))
    return None


def _mesh_group_size(text: str) -> int:
    # mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'b'}   or  ... {'b':(2)2,'a'}
    m = re.match(r"mesh\[([^\]]*)\]", text)
    if not m:
        raise ValueError("bad mesh replica groups %r" % text[:80])
    sizes = {}
    for part in m.group(1).split(","):
        part = part.strip()
        if not part:
            continue
        n, s = part.rsplit("=", 1)
        sizes[n.strip().strip("'\"")] = int(s)
    rest = text[m.end():]
    # skip ", device_ids=(...)" if present, then read the axes group {...}
    brace = rest.find("{")
    if brace < 0:
        raise ValueError("no axes in mesh replica groups %r" % text[:80])
    axes = rest[brace + 1:_match_close(rest, brace) - 1]
    k = 1
    for a in _split_top(axes):
        if not a:
            continue
        sub = re.match(r"""['"]?([^'":]+)['"]?\s*:\s*\(\s*\d+\s*\)\s*(\d+)$""", a)
        if sub:
            k *= int(sub.group(2))
        else:
            k *= sizes[a.strip().strip("'\"")]
    return k


def _pairs(attrs: str):
    st = _attr(attrs, "source_target_pairs")
    if st is None:
        return None
    return [tuple(int(v) for v in p) for p in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", st)]


def _group_size(attrs: str, n_devices):
    rg = _attr(attrs, "replica_groups")
    if rg is None:
        return n_devices
    rg = rg.strip()
    if rg.startswith("mesh["):
        return _mesh_group_size(rg)
    if rg.startswith("["):  # iota [G,k]<=[...]
        dims = [int(d) for d in rg[1:rg.index("]")].split(",") if d.strip()]
        return dims[-1] if dims else n_devices
    if rg.startswith("{"):
        inner = rg[1:-1].strip()
        if not inner:
            return n_devices
        first = _split_top(inner)[0]
        ids = [d for d in first.strip("{}").split(",") if d.strip()]
        return len(ids)
    raise ValueError("cannot read replica_groups=%r" % rg[:80])


def collectives(hlo_text: str) -> list[dict]:
    instrs = parse_instructions(hlo_text)
    shapes = {i["name"]: i["shape"] for i in instrs}
    n_devices = _header_devices(hlo_text)
    out = []
    for ins in instrs:
        op = ins["op"]
        if op.endswith("-done") or op.endswith("-update"):
            continue
        base = op[:-len("-start")] if op.endswith("-start") else op
        if base not in COLLECTIVE_OPS:
            continue
        in_shapes = [shapes[o] for o in ins["operands"] if o in shapes]
        missing = [o for o in ins["operands"] if o not in shapes]
        if missing:
            raise ValueError("%s: operands %s have no definition" % (ins["name"], missing))
        in_bytes = sum((shape_bytes(s) for s in in_shapes), Fraction(0))
        out_shape = ins["shape"]
        if op.endswith("-start") and base in ("all-gather", "collective-permute") \
                and out_shape[0] == "tuple" and len(out_shape[1]) >= 2:
            out_shape = out_shape[1][1]  # (inputs, outputs[, contexts...])
        out_bytes = shape_bytes(out_shape)
        k = _group_size(ins["attrs"], n_devices) if base != "collective-permute" else None
        approx = False
        if base == "all-gather":
            recv = out_bytes - in_bytes
        elif base == "all-to-all":
            if k is None:
                k = len(in_shapes) if len(in_shapes) > 1 else None
            if k is None:
                raise ValueError("%s: cannot tell the group size" % ins["name"])
            recv = in_bytes * (k - 1) / k
        elif base == "collective-permute":
            recv = shape_bytes(in_shapes[0]) if in_shapes else Fraction(0)
            pairs = _pairs(ins["attrs"])
            if pairs is not None and all(a == b for a, b in pairs):
                recv = Fraction(0)  # every device sends to itself: nothing crosses a link
        elif base == "all-reduce":
            recv, approx = in_bytes, True
        elif base == "reduce-scatter":
            if k is None:
                raise ValueError("%s: cannot tell the group size" % ins["name"])
            recv = out_bytes * (k - 1)
        elif base == "ragged-all-to-all":
            # operands: input, output, input_offsets, send_sizes, output_offsets, recv_sizes
            recv = shape_bytes(in_shapes[1]) if len(in_shapes) > 1 else out_bytes
            approx = True
        else:  # collective-broadcast
            recv = in_bytes
        out.append({
            "op": base,
            "name": ins["name"],
            "bytes": int(recv) if recv.denominator == 1 else float(recv),
            "group_size": k,
            "in_bytes": int(in_bytes),
            "out_bytes": int(out_bytes),
            "approx": approx,
        })
    return out


def recv_bytes(hlo_text: str, all_reduce: str = "input") -> int:
    """Sum of ``bytes`` over the collectives. all_reduce="ring" counts an all-reduce as a ring
    moves it, 2(k-1)/k of its input (reshard's cost model), instead of its input bytes."""
    total = Fraction(0)
    for c in collectives(hlo_text):
        if all_reduce == "ring" and c["op"].startswith("all-reduce") and c["group_size"]:
            k = c["group_size"]
            total += Fraction(c["in_bytes"]) * 2 * (k - 1) / k
        else:
            total += Fraction(c["bytes"])
    return int(total) if total.denominator == 1 else float(total)


if __name__ == "__main__":
    import json
    import sys
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    cs = collectives(text)
    for c in cs:
        print(json.dumps(c))
    print("recv_bytes", recv_bytes(text))
