//! A GGUF (v2/v3) parser over a byte slice: header, metadata of every value type (arrays
//! included), tensor infos, alignment and the data offset.
//!
//! The parser never panics and never allocates more than the input can justify: every count
//! and length is checked against the bytes that remain before anything is reserved.

use std::collections::HashMap;
use std::fmt;

/// The four magic bytes at the start of every GGUF file ("GGUF").
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The alignment of the tensor data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The largest tensor rank GGUF allows (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// Why a GGUF file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GgufError {
    /// The file ended before `what` could be read (at byte `offset`).
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Byte offset of the read.
        offset: usize,
    },
    /// The first four bytes are not "GGUF".
    BadMagic([u8; 4]),
    /// A GGUF version this parser does not know (2 and 3 are supported).
    UnsupportedVersion(u32),
    /// A metadata value type code outside the GGUF specification.
    BadValueType(u32),
    /// A count or length that cannot fit in the remaining bytes.
    ImplausibleCount {
        /// What was being counted.
        what: &'static str,
        /// The count read from the file.
        count: u64,
    },
    /// A string that is not UTF-8.
    BadUtf8 {
        /// Byte offset of the string.
        offset: usize,
    },
    /// Nested arrays deeper than the parser accepts.
    NestingTooDeep,
    /// A tensor with more than [`MAX_DIMS`] dimensions or a zero/overflowing shape.
    BadShape {
        /// Tensor name.
        name: String,
    },
    /// A tensor type code outside ggml's table.
    UnknownTensorType {
        /// Tensor name.
        name: String,
        /// The type code.
        code: u32,
    },
    /// A tensor whose row length is not a multiple of its type's block size.
    BadBlockMultiple {
        /// Tensor name.
        name: String,
    },
    /// `general.alignment` is zero or not a power of two.
    BadAlignment(u64),
    /// A tensor whose data lies (partly) outside the file or is misaligned.
    TensorOutOfBounds {
        /// Tensor name.
        name: String,
    },
    /// Two tensors with one name.
    DuplicateTensor(String),
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { what, offset } => {
                write!(
                    f,
                    "GGUF file truncated while reading {what} at byte {offset}"
                )
            }
            Self::BadMagic(m) => write!(f, "not a GGUF file (magic {m:02x?})"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported GGUF version {v}"),
            Self::BadValueType(t) => write!(f, "unknown GGUF metadata value type {t}"),
            Self::ImplausibleCount { what, count } => {
                write!(f, "implausible {what} count {count} (larger than the file)")
            }
            Self::BadUtf8 { offset } => write!(f, "string at byte {offset} is not UTF-8"),
            Self::NestingTooDeep => write!(f, "metadata arrays nested too deeply"),
            Self::BadShape { name } => write!(f, "tensor `{name}` has an invalid shape"),
            Self::UnknownTensorType { name, code } => {
                write!(f, "tensor `{name}` has unknown ggml type {code}")
            }
            Self::BadBlockMultiple { name } => {
                write!(
                    f,
                    "tensor `{name}` row length is not a multiple of its block size"
                )
            }
            Self::BadAlignment(a) => write!(f, "general.alignment {a} is not a power of two"),
            Self::TensorOutOfBounds { name } => {
                write!(
                    f,
                    "tensor `{name}` data lies outside the file or is misaligned"
                )
            }
            Self::DuplicateTensor(n) => write!(f, "tensor `{n}` appears twice"),
        }
    }
}

impl std::error::Error for GgufError {}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `UINT8`
    U8(u8),
    /// `INT8`
    I8(i8),
    /// `UINT16`
    U16(u16),
    /// `INT16`
    I16(i16),
    /// `UINT32`
    U32(u32),
    /// `INT32`
    I32(i32),
    /// `FLOAT32`
    F32(f32),
    /// `BOOL`
    Bool(bool),
    /// `STRING`
    String(String),
    /// `ARRAY` (homogeneous; the element type is kept so empty arrays stay typed)
    Array(u32, Vec<Value>),
    /// `UINT64`
    U64(u64),
    /// `INT64`
    I64(i64),
    /// `FLOAT64`
    F64(f64),
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    /// The value as a float, if it is any number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
    /// The value as an array, if it is one.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Self::Array(_, v) => Some(v),
            _ => None,
        }
    }
}

/// ggml tensor element types: hetero-sme's vocabulary, shared by the whole family.
pub use hetero_sme::GgmlType;

/// One tensor's description from the header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost (contiguous) first, as ggml stores them.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes (0 when the type's block size is not tabulated).
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF header.
#[derive(Debug, Clone)]
pub struct Gguf {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Alignment of the data section.
    pub alignment: u64,
    /// Byte offset of the data section from the start of the file.
    pub data_offset: u64,
    index: HashMap<String, usize>,
}

const MAX_NESTING: u32 = 4;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], GgufError> {
        if self.remaining() < n {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }
    /// A count of items each at least `min_size` bytes: rejected when they cannot fit.
    fn count(&mut self, what: &'static str, min_size: u64) -> Result<usize, GgufError> {
        let count = self.u64(what)?;
        let need = count.checked_mul(min_size.max(1));
        match need {
            Some(n) if n <= self.remaining() as u64 => Ok(count as usize),
            _ => Err(GgufError::ImplausibleCount { what, count }),
        }
    }
    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len = self.count(what, 1)?;
        let at = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::BadUtf8 { offset: at })
    }
    fn value(&mut self, ty: u32, depth: u32) -> Result<Value, GgufError> {
        const W: &str = "metadata value";
        Ok(match ty {
            0 => Value::U8(u8::from_le_bytes(self.arr(W)?)),
            1 => Value::I8(i8::from_le_bytes(self.arr(W)?)),
            2 => Value::U16(u16::from_le_bytes(self.arr(W)?)),
            3 => Value::I16(i16::from_le_bytes(self.arr(W)?)),
            4 => Value::U32(u32::from_le_bytes(self.arr(W)?)),
            5 => Value::I32(i32::from_le_bytes(self.arr(W)?)),
            6 => Value::F32(f32::from_le_bytes(self.arr(W)?)),
            7 => Value::Bool(self.arr::<1>(W)?[0] != 0),
            8 => Value::String(self.string("metadata string")?),
            9 => {
                if depth >= MAX_NESTING {
                    return Err(GgufError::NestingTooDeep);
                }
                let ety = self.u32("array element type")?;
                let min = min_value_size(ety).ok_or(GgufError::BadValueType(ety))?;
                let n = self.count("array element", min)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(ety, depth + 1)?);
                }
                Value::Array(ety, v)
            }
            10 => Value::U64(u64::from_le_bytes(self.arr(W)?)),
            11 => Value::I64(i64::from_le_bytes(self.arr(W)?)),
            12 => Value::F64(f64::from_le_bytes(self.arr(W)?)),
            t => return Err(GgufError::BadValueType(t)),
        })
    }
}

/// The fewest bytes a value of type `ty` occupies; `None` for unknown types.
fn min_value_size(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,
        9 => 12,
        10..=12 => 8,
        _ => return None,
    })
}

impl Gguf {
    /// Parses the header of a GGUF file held in `buf` (the whole file, so tensor extents can be
    /// checked against its length).
    pub fn parse(buf: &[u8]) -> Result<Self, GgufError> {
        let mut r = Reader { buf, pos: 0 };
        let magic: [u8; 4] = r.arr("magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic(magic));
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        // Each tensor info takes at least 8 (name len) + 4 (n_dims) + 4 (type) + 8 (offset).
        let n_tensors = r.u64("tensor count")?;
        // Each metadata entry takes at least 8 (key len) + 4 (type) + 1 (value).
        let n_kv = r.count("metadata entry", 13)?;
        if n_tensors
            .checked_mul(24)
            .is_none_or(|n| n > r.remaining() as u64)
        {
            return Err(GgufError::ImplausibleCount {
                what: "tensor",
                count: n_tensors,
            });
        }
        let mut metadata = Vec::with_capacity(n_kv);
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let ty = r.u32("metadata value type")?;
            let v = r.value(ty, 0)?;
            metadata.push((key, v));
        }
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            Some((_, v)) => v.as_u64().unwrap_or(0),
            None => DEFAULT_ALIGNMENT,
        };
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::BadAlignment(alignment));
        }
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut index = HashMap::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = r.string("tensor name")?;
            let n_dims = r.u32("tensor rank")?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::BadShape { name });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64("tensor dimension")?);
            }
            let code = r.u32("tensor type")?;
            let offset = r.u64("tensor offset")?;
            let ty = GgmlType::from_code(code).ok_or_else(|| GgufError::UnknownTensorType {
                name: name.clone(),
                code,
            })?;
            let mut n_el: u64 = 1;
            for &d in &dims {
                n_el = match n_el.checked_mul(d) {
                    Some(v) if d > 0 => v,
                    _ => return Err(GgufError::BadShape { name }),
                };
            }
            let size = match ty.block() {
                Some((be, bb)) => {
                    let (be, bb) = (be as u64, bb as u64);
                    if dims[0] % be != 0 {
                        return Err(GgufError::BadBlockMultiple { name });
                    }
                    (n_el / be)
                        .checked_mul(bb)
                        .ok_or_else(|| GgufError::BadShape { name: name.clone() })?
                }
                None => 0,
            };
            if index.insert(name.clone(), tensors.len()).is_some() {
                return Err(GgufError::DuplicateTensor(name));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ty,
                offset,
                size,
            });
        }
        let pos = r.pos as u64;
        let data_offset = pos.div_ceil(alignment) * alignment;
        let file_len = buf.len() as u64;
        for t in &tensors {
            let ok = t.offset % alignment == 0
                && data_offset
                    .checked_add(t.offset)
                    .and_then(|s| s.checked_add(t.size))
                    .is_some_and(|end| end <= file_len);
            if !ok {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                });
            }
        }
        Ok(Self {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            index,
        })
    }

    /// The metadata value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor info named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of tensor `t` within `file` (the same buffer that was parsed).
    pub fn tensor_data<'a>(&self, file: &'a [u8], t: &TensorInfo) -> Option<&'a [u8]> {
        let start = usize::try_from(self.data_offset.checked_add(t.offset)?).ok()?;
        let end = start.checked_add(usize::try_from(t.size).ok()?)?;
        file.get(start..end)
    }
}

/// Writes a GGUF file (v3) from metadata and tensors; used by tests to build synthetic files.
/// Tensors are `(name, dims, type code, data)`; offsets are assigned with 32-byte alignment.
pub fn write(metadata: &[(&str, Value)], tensors: &[(&str, &[u64], u32, &[u8])]) -> Vec<u8> {
    fn s(out: &mut Vec<u8>, v: &str) {
        out.extend_from_slice(&(v.len() as u64).to_le_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    fn code(v: &Value) -> u32 {
        match v {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(..) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }
    fn val(out: &mut Vec<u8>, v: &Value) {
        match v {
            Value::U8(x) => out.push(*x),
            Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(x) => out.push(u8::from(*x)),
            Value::String(x) => s(out, x),
            Value::Array(t, xs) => {
                out.extend_from_slice(&t.to_le_bytes());
                out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                for x in xs {
                    val(out, x);
                }
            }
            Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        }
    }
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        s(&mut out, k);
        out.extend_from_slice(&code(v).to_le_bytes());
        val(&mut out, v);
    }
    let mut off = 0u64;
    for (name, dims, ty, data) in tensors {
        s(&mut out, name);
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in *dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
        off += (data.len() as u64).div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT;
    }
    while !(out.len() as u64).is_multiple_of(DEFAULT_ALIGNMENT) {
        out.push(0);
    }
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
        while !(out.len() as u64).is_multiple_of(DEFAULT_ALIGNMENT) {
            out.push(0);
        }
    }
    out
}

/// Why a GGUF file could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The file could not be opened or mapped.
    Io(std::path::PathBuf, std::io::Error),
    /// The file is not a valid GGUF file.
    Parse(std::path::PathBuf, GgufError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "cannot read model file {}: {e}", p.display()),
            Self::Parse(p, e) => write!(f, "corrupt model file {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(_, e) => Some(e),
            Self::Parse(_, e) => Some(e),
        }
    }
}

/// A memory-mapped GGUF file and its parsed header.
pub struct GgufFile {
    map: memmap2::Mmap,
    /// The parsed header.
    pub header: Gguf,
}

impl GgufFile {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self, OpenError> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| OpenError::Io(path.into(), e))?;
        // SAFETY: `Mmap::map` requires that the file is not modified or truncated while mapped
        // (that would be undefined behaviour for the `&[u8]` we hand out). Model files are
        // read-only inputs; like every mmap-based loader (llama.cpp included) we document that
        // the file must not be rewritten while the engine runs.
        let map =
            unsafe { memmap2::Mmap::map(&file) }.map_err(|e| OpenError::Io(path.into(), e))?;
        let header = Gguf::parse(&map).map_err(|e| OpenError::Parse(path.into(), e))?;
        Ok(Self { map, header })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The data of tensor `name`, with its info.
    pub fn tensor(&self, name: &str) -> Option<(&TensorInfo, &[u8])> {
        let t = self.header.tensor(name)?;
        Some((t, self.header.tensor_data(&self.map, t)?))
    }
}
