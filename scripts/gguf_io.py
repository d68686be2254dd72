"""gguf_io.py — a small GGUF v3 reader and writer over numpy, enough for
scripts/train_dflash.py (no gguf package is installed here).

Layout (little-endian), as src/gguf reads it:

    "GGUF" u32 version=3  u64 n_tensors  u64 n_kv
    n_kv x      { str key, u32 value_type, value }
    n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
    pad to general.alignment (32 when absent)
    tensor data, each at its offset (a multiple of the alignment) from here

    str   = u64 length + bytes (no terminator)
    array = u32 element_type + u64 count + elements

ne[0] is the fastest-varying dimension (ggml order), so a 2-D tensor
{cols, rows} is a numpy array of shape (rows, cols).

Only the tensor types this project needs are decoded: F32, F16 and I64.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
ALIGNMENT = 32

# value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}
_NP_OF_VTYPE = {U8: np.uint8, I8: np.int8, U16: np.uint16, I16: np.int16, U32: np.uint32, I32: np.int32,
                F32: np.float32, BOOL: np.bool_, U64: np.uint64, I64: np.int64, F64: np.float64}

# ggml tensor types
GGML_F32, GGML_F16, GGML_I64 = 0, 1, 27
_NP_OF_GGML = {GGML_F32: np.float32, GGML_F16: np.float16, GGML_I64: np.int64}


class GGUFValue:
    """A metadata value with its GGUF type, so a copy keeps the exact type
    (the tokenizer's arrays are copied verbatim into the drafter)."""

    def __init__(self, vtype, value, arr_type=None):
        self.vtype, self.value, self.arr_type = vtype, value, arr_type

    def __repr__(self):
        v = self.value
        if self.vtype == ARR and len(v) > 8:
            v = f"[{len(v)} items]"
        return f"GGUFValue({self.vtype}, {v})"


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == STR:
            return self.string()
        if vtype == ARR:
            at, n = self.take("<I"), self.take("<Q")
            if at == STR:
                return GGUFValue(ARR, [self.string() for _ in range(n)], STR)
            dt = np.dtype(_NP_OF_VTYPE[at]).newbyteorder("<")
            a = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos).copy()
            self.pos += n * dt.itemsize
            return GGUFValue(ARR, a, at)
        return self.take(_SCALAR[vtype])


def read(path):
    """Returns (metadata, tensors): metadata maps key -> GGUFValue, tensors
    maps name -> numpy array (F32/F16/I64 only; shape reversed from ggml's ne)."""
    with open(path, "rb") as f:
        buf = f.read()
    r = _Reader(buf)
    if buf[:4] != GGUF_MAGIC:
        raise ValueError(f"{path}: not a GGUF file")
    r.pos = 4
    version = r.take("<I")
    if version != 3:
        raise ValueError(f"{path}: GGUF version {version} (3 expected)")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("<I")
        v = r.value(vtype)
        meta[key] = v if isinstance(v, GGUFValue) else GGUFValue(vtype, v)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        infos.append((name, ne, r.take("<I"), r.take("<Q")))
    align = meta["general.alignment"].value if "general.alignment" in meta else ALIGNMENT
    data0 = (r.pos + align - 1) // align * align
    tensors = {}
    for name, ne, gtype, off in infos:
        if gtype not in _NP_OF_GGML:
            raise ValueError(f"{path}: tensor {name} has ggml type {gtype}; only F32, F16 and I64 are read")
        n = int(np.prod(ne))
        a = np.frombuffer(buf, dtype=np.dtype(_NP_OF_GGML[gtype]).newbyteorder("<"), count=n, offset=data0 + off)
        tensors[name] = a.reshape(list(reversed(ne))).copy()
    return meta, tensors


def _pack_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _pack_value(v):
    if v.vtype == STR:
        return _pack_str(v.value)
    if v.vtype == ARR:
        out = struct.pack("<IQ", v.arr_type, len(v.value))
        if v.arr_type == STR:
            return out + b"".join(_pack_str(s) for s in v.value)
        return out + np.asarray(v.value, dtype=np.dtype(_NP_OF_VTYPE[v.arr_type]).newbyteorder("<")).tobytes()
    return struct.pack(_SCALAR[v.vtype], v.value)


def write(path, meta, tensors):
    """meta: key -> GGUFValue (written in insertion order); tensors: name ->
    numpy array of float32, float16 or int64 (written in insertion order,
    each padded to the alignment)."""
    head = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(meta)))
    for k, v in meta.items():
        head += _pack_str(k) + struct.pack("<I", v.vtype) + _pack_value(v)
    blobs, off = [], 0
    for name, a in tensors.items():
        gtype = {np.dtype(np.float32): GGML_F32, np.dtype(np.float16): GGML_F16,
                 np.dtype(np.int64): GGML_I64}[a.dtype]
        ne = list(reversed(a.shape))
        head += _pack_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", gtype, off)
        blob = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        blobs.append(blob)
        off += (len(blob) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    head += b"\0" * ((-len(head)) % ALIGNMENT)
    with open(path, "wb") as f:
        f.write(head)
        for blob in blobs:
            f.write(blob + b"\0" * ((-len(blob)) % ALIGNMENT))


# convenience constructors for the drafter's metadata
def u32(v): return GGUFValue(U32, int(v))
def f32(v): return GGUFValue(F32, float(v))
def string(v): return GGUFValue(STR, v)
def arr_i32(v): return GGUFValue(ARR, np.asarray(v, dtype=np.int32), I32)
def arr_bool(v): return GGUFValue(ARR, np.asarray(v, dtype=np.bool_), BOOL)
