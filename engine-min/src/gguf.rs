//! A GGUF (v2/v3) parser over a byte slice: header, metadata of every value type (arrays
//! included), tensor infos, alignment and the data offset.
//!
//! The parser never panics and never allocates more than the input can justify: every count
//! and length is checked against the bytes that remain before anything is reserved, and the
//! memory the parsed header takes is charged against a limit as it is read
//! ([`Gguf::parse_with`]; [`DEFAULT_HEADER_LIMIT`] for [`Gguf::parse`]). The tensor table is
//! checked against the data section: every tensor inside the file and aligned, no two
//! overlapping, and each tensor's type and shape accounting for all the bytes up to the next
//! tensor (or the end of the file), as llama.cpp's loader demands of the layout.
//!
//! [`GgufFile`] holds the file either memory-mapped ([`GgufFile::open`]) or read into memory
//! ([`GgufFile::read`]); both refuse anything but a regular file before a read can block.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::limits::{BudgetError, MemoryBudget};

/// The four magic bytes at the start of every GGUF file ("GGUF").
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The alignment of the tensor data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The largest tensor rank GGUF allows (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// The memory [`Gguf::parse`] lets the parsed header (metadata values, tensor table) take:
/// 1 GiB, a hundred times what a 256k-token vocabulary needs. A file of tiny array elements
/// would otherwise make the parser allocate up to 32 bytes per byte of input.
pub const DEFAULT_HEADER_LIMIT: u64 = 1 << 30;
/// Alignment of the buffer [`GgufFile::read`] reads a file into (a cache line; GGUF's own
/// alignment is 32).
pub const READ_ALIGNMENT: usize = 64;

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
        /// Its offset from the start of the data section.
        offset: u64,
        /// Its size in bytes (from its type and shape).
        size: u64,
        /// Bytes in the data section (file length minus data offset; 0 if the header ends
        /// past the file).
        data_len: u64,
    },
    /// Two tensors with one name.
    DuplicateTensor(String),
    /// A tensor's bytes (from its type and shape) run into the next tensor's: the tensors
    /// overlap, or the first one's type or shape is wrong (e.g. retyped to a wider type).
    TensorOverlap {
        /// The tensor that runs over.
        name: String,
        /// Its type.
        ty: GgmlType,
        /// Its offset in the data section.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// The tensor it runs into.
        next: String,
        /// That tensor's offset.
        next_offset: u64,
    },
    /// A tensor's type and shape account for fewer bytes than lie between it and the next
    /// tensor (or the end of the file), beyond alignment padding: its type or shape does not
    /// describe its data (e.g. retyped to a narrower type).
    TensorSizeMismatch {
        /// Tensor name.
        name: String,
        /// Its type.
        ty: GgmlType,
        /// Its dimensions.
        dims: Vec<u64>,
        /// Its size in bytes from type and shape.
        size: u64,
        /// Bytes from its offset to the next tensor's offset (or the end of the file).
        space: u64,
    },
    /// The parsed header would take more memory than the limit.
    Memory(BudgetError),
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
            Self::TensorOutOfBounds {
                name,
                offset,
                size,
                data_len,
            } => write!(
                f,
                "tensor `{name}` ({size} bytes at data offset {offset}) lies outside the \
                 {data_len}-byte data section or is misaligned"
            ),
            Self::DuplicateTensor(n) => write!(f, "tensor `{n}` appears twice"),
            Self::TensorOverlap {
                name,
                ty,
                offset,
                size,
                next,
                next_offset,
            } => write!(
                f,
                "tensor `{name}` ({ty:?}, {size} bytes at data offset {offset}) runs into \
                 tensor `{next}` at data offset {next_offset}: overlapping tensors or a wrong \
                 type or shape"
            ),
            Self::TensorSizeMismatch {
                name,
                ty,
                dims,
                size,
                space,
            } => write!(
                f,
                "tensor `{name}` ({ty:?} {dims:?}) takes {size} bytes but {space} bytes lie \
                 before the next tensor or the end of the file: its type or shape does not \
                 describe its data"
            ),
            Self::Memory(e) => write!(f, "GGUF header: {e}"),
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

impl fmt::Display for Value {
    /// The value as a person would write it: numbers plainly (`NaN`, `-1`, `4294967295`),
    /// strings quoted (long ones cut), arrays by element count.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::U8(v) => write!(f, "{v}"),
            Self::I8(v) => write!(f, "{v}"),
            Self::U16(v) => write!(f, "{v}"),
            Self::I16(v) => write!(f, "{v}"),
            Self::U32(v) => write!(f, "{v}"),
            Self::I32(v) => write!(f, "{v}"),
            Self::F32(v) => write!(f, "{v}"),
            Self::Bool(v) => write!(f, "{v}"),
            Self::String(v) => {
                let cut: String = v.chars().take(40).collect();
                let more = if cut.len() < v.len() { "…" } else { "" };
                write!(f, "{cut:?}{more}")
            }
            Self::Array(_, v) => write!(f, "an array of {} elements", v.len()),
            Self::U64(v) => write!(f, "{v}"),
            Self::I64(v) => write!(f, "{v}"),
            Self::F64(v) => write!(f, "{v}"),
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

/// What the memory charge of the parsed header is called in errors.
const HEADER: &str = "GGUF metadata and tensor table";

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Bytes of memory the parsed header takes so far (charged before each allocation).
    charged: u64,
    limit: MemoryBudget,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Charges `items × bytes_each` bytes of memory against the limit before they are
    /// allocated.
    fn charge(&mut self, items: u64, bytes_each: usize) -> Result<(), GgufError> {
        let over = || GgufError::Memory(BudgetError::Overflow { what: HEADER });
        let add = items.checked_mul(bytes_each as u64).ok_or_else(over)?;
        self.charged = self.charged.checked_add(add).ok_or_else(over)?;
        self.limit
            .check(HEADER, self.charged)
            .map(drop)
            .map_err(GgufError::Memory)
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
        self.charge(len as u64, 1)?;
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
                self.charge(n as u64, std::mem::size_of::<Value>())?;
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

/// Memory one tensor-table entry takes besides its name: the `TensorInfo`, its index entry
/// (name, position, hash-table overhead) and up to [`MAX_DIMS`] dimensions.
const TENSOR_ENTRY_BYTES: usize = std::mem::size_of::<TensorInfo>()
    + std::mem::size_of::<(String, usize)>()
    + 16
    + MAX_DIMS as usize * 8;

impl Gguf {
    /// Parses the header of a GGUF file held in `buf` (the whole file, so tensor extents can be
    /// checked against its length), letting the parsed header take at most
    /// [`DEFAULT_HEADER_LIMIT`] bytes of memory.
    pub fn parse(buf: &[u8]) -> Result<Self, GgufError> {
        Self::parse_with(buf, &MemoryBudget::with_limit(DEFAULT_HEADER_LIMIT))
    }

    /// [`Gguf::parse`] under the memory limit `budget`: the memory every string, array and
    /// table entry takes is charged against it before it is allocated
    /// ([`GgufError::Memory`] when over).
    pub fn parse_with(buf: &[u8], budget: &MemoryBudget) -> Result<Self, GgufError> {
        let mut r = Reader {
            buf,
            pos: 0,
            charged: 0,
            limit: *budget,
        };
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
        r.charge(n_kv as u64, std::mem::size_of::<(String, Value)>())?;
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
        r.charge(n_tensors, TENSOR_ENTRY_BYTES)?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut index = HashMap::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = r.string("tensor name")?;
            // The index keeps a second copy of the name.
            r.charge(name.len() as u64, 1)?;
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
        let data_len = (buf.len() as u64).saturating_sub(data_offset);
        for t in &tensors {
            let ok = t.offset % alignment == 0
                && t.offset
                    .checked_add(t.size)
                    .is_some_and(|end| end <= data_len);
            if !ok {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                    offset: t.offset,
                    size: t.size,
                    data_len,
                });
            }
        }
        r.charge(n_tensors, std::mem::size_of::<usize>())?;
        check_layout(&tensors, alignment, data_len)?;
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

/// Checks the tensors' extents (each already inside the `data_len`-byte data section and
/// aligned) against each other, in offset order: first that none runs into the next
/// ([`GgufError::TensorOverlap`]), then that each one's type and shape account for every byte
/// up to the next tensor or the end of the data, less than `alignment` of padding left over
/// ([`GgufError::TensorSizeMismatch`]). llama.cpp's loader demands the same contiguous layout.
/// A retype to a wider type is always caught (the tensor runs into the next one or out of the
/// file); one to a narrower type when it frees at least `alignment` bytes (32 by default: any
/// tensor of more than a few dozen elements, every matrix and norm of a real model).
/// Tensors of untabulated types (size 0: extent unknown) are not checked themselves, but their
/// offsets still end the tensor before them.
fn check_layout(tensors: &[TensorInfo], alignment: u64, data_len: u64) -> Result<(), GgufError> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_unstable_by_key(|&i| (tensors[i].offset, i));
    // Overlaps first: a tensor moved onto another leaves a gap behind, which would otherwise be
    // reported against an innocent neighbour.
    for w in order.windows(2) {
        let (t, next) = (&tensors[w[0]], &tensors[w[1]]);
        // In bounds (checked by the caller), so offset + size does not overflow.
        if t.size > 0 && t.offset + t.size > next.offset {
            return Err(GgufError::TensorOverlap {
                name: t.name.clone(),
                ty: t.ty,
                offset: t.offset,
                size: t.size,
                next: next.name.clone(),
                next_offset: next.offset,
            });
        }
    }
    let ends = order
        .iter()
        .skip(1)
        .map(|&i| tensors[i].offset)
        .chain([data_len]);
    for (&i, end) in order.iter().zip(ends) {
        let t = &tensors[i];
        // No overlaps and every tensor in bounds, so space >= size.
        let space = end - t.offset;
        if t.size > 0 && space - t.size >= alignment {
            return Err(GgufError::TensorSizeMismatch {
                name: t.name.clone(),
                ty: t.ty,
                dims: t.dims.clone(),
                size: t.size,
                space,
            });
        }
    }
    Ok(())
}

/// One tensor's entry in a header [`encode_header`] writes: its name, dims (innermost first),
/// type code and data size in bytes (the data itself comes later, streamed or in one piece).
#[derive(Debug, Clone, Copy)]
pub struct TensorEntry<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Dimensions, innermost first.
    pub dims: &'a [u64],
    /// ggml type code.
    pub ty: u32,
    /// Bytes of data.
    pub bytes: u64,
}

/// Zero bytes that pad `len` up to the next multiple of [`DEFAULT_ALIGNMENT`].
pub fn padding(len: u64) -> usize {
    (len.next_multiple_of(DEFAULT_ALIGNMENT) - len) as usize
}

/// Encodes a GGUF (v3) header: metadata, then the tensor infos with offsets assigned in order
/// at 32-byte alignment, then the padding up to the data section. The tensors' data must follow
/// in the same order, each padded with [`padding`] of its length, so a writer can stream the
/// data of a file too large to hold after writing this.
pub fn encode_header(metadata: &[(&str, Value)], tensors: &[TensorEntry<'_>]) -> Vec<u8> {
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
    for t in tensors {
        s(&mut out, t.name);
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ty.to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
        off += t.bytes.next_multiple_of(DEFAULT_ALIGNMENT);
    }
    out.resize(out.len() + padding(out.len() as u64), 0);
    out
}

/// Writes a GGUF file (v3) from metadata and tensors in memory; used by tests to build
/// synthetic files ([`encode_header`] then each tensor's data, padded).
/// Tensors are `(name, dims, type code, data)`; offsets are assigned with 32-byte alignment.
pub fn write(metadata: &[(&str, Value)], tensors: &[(&str, &[u64], u32, &[u8])]) -> Vec<u8> {
    let entries: Vec<TensorEntry<'_>> = tensors
        .iter()
        .map(|&(name, dims, ty, data)| TensorEntry {
            name,
            dims,
            ty,
            bytes: data.len() as u64,
        })
        .collect();
    let mut out = encode_header(metadata, &entries);
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
        out.resize(out.len() + padding(data.len() as u64), 0);
    }
    out
}

/// Why a GGUF file could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The file could not be opened, mapped or read.
    Io(PathBuf, std::io::Error),
    /// The file is not a valid GGUF file.
    Parse(PathBuf, GgufError),
    /// The path names something other than a regular file (a FIFO, a device, a directory, a
    /// socket): refused before anything could block on it.
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is ("a FIFO", "a directory", ...).
        kind: &'static str,
    },
    /// Reading the file into memory ([`GgufFile::read`]) would exceed the memory budget.
    Memory(PathBuf, BudgetError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "cannot read model file {}: {e}", p.display()),
            Self::Parse(p, e) => write!(f, "corrupt model file {}: {e}", p.display()),
            Self::NotRegular { path, kind } => write!(
                f,
                "cannot read model file {}: it is {kind}, not a regular file",
                path.display()
            ),
            Self::Memory(p, e) => {
                write!(f, "cannot read model file {} into memory: {e}", p.display())
            }
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(_, e) => Some(e),
            Self::Parse(_, e) => Some(e),
            Self::NotRegular { .. } => None,
            Self::Memory(_, e) => Some(e),
        }
    }
}

/// What a non-regular file is, for messages; `None` for a regular file.
fn non_regular_kind(ft: std::fs::FileType) -> Option<&'static str> {
    if ft.is_file() {
        return None;
    }
    if ft.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if ft.is_char_device() {
            return Some("a character device");
        }
        if ft.is_block_device() {
            return Some("a block device");
        }
        if ft.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// [`open_regular`] with its refusals as I/O errors (`NotFound` stays `NotFound`), for other
/// files the engine maps (the prepared-weights cache).
pub(crate) fn open_regular_io(path: &Path) -> std::io::Result<std::fs::File> {
    open_regular(path).map_err(|e| match e {
        OpenError::Io(_, e) => e,
        other => std::io::Error::other(other.to_string()),
    })
}

/// Opens `path` for reading if it is a regular file, without ever blocking on it.
///
/// Two checks, for two reasons: `metadata` (stat, which follows symlinks and opens nothing)
/// refuses a FIFO, device or directory before it is opened at all, so no device sees an open;
/// the open itself is `O_NONBLOCK` (opening a FIFO without a writer then returns at once
/// instead of waiting for one) and the opened descriptor is checked again with `fstat`, which
/// closes the window in which the path could be swapped for a FIFO between the two steps.
/// `O_NONBLOCK` has no effect on reading a regular file.
fn open_regular(path: &Path) -> Result<std::fs::File, OpenError> {
    let io = |e| OpenError::Io(path.into(), e);
    let not_regular = |kind| OpenError::NotRegular {
        path: path.into(),
        kind,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if let Some(kind) = non_regular_kind(meta.file_type()) {
        return Err(not_regular(kind));
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if let Some(kind) = non_regular_kind(meta.file_type()) {
        return Err(not_regular(kind));
    }
    Ok(file)
}

/// The file's bytes: mapped, or read into a buffer at [`READ_ALIGNMENT`].
enum Storage {
    Mapped(memmap2::Mmap),
    Owned(AlignedBytes),
}

/// `len` bytes at a [`READ_ALIGNMENT`]-aligned start inside an over-allocated `Vec` (the
/// `Vec`'s heap block never moves, so the start stays aligned).
struct AlignedBytes {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBytes {
    /// `len` zero bytes, aligned; the allocation is `len + READ_ALIGNMENT - 1` bytes.
    fn zeroed(len: usize) -> Option<Self> {
        let buf = vec![0u8; len.checked_add(READ_ALIGNMENT - 1)?];
        let misalign = buf.as_ptr() as usize % READ_ALIGNMENT;
        let start = (READ_ALIGNMENT - misalign) % READ_ALIGNMENT;
        Some(Self { buf, start, len })
    }
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// A GGUF file, memory-mapped or read into memory, and its parsed header.
///
/// **The mapped form and truncation.** A mapped file is read lazily, page by page, as the
/// weights are used. If the file shrinks while the process runs (rewritten in place, a
/// network share or removable medium going away), touching a page past the new end raises
/// `SIGBUS` and the process dies: no error can be returned, because the fault happens on an
/// ordinary memory read inside a kernel. Use [`GgufFile::read`] (the CLI's `--no-mmap`) for
/// files on network or removable storage, or that something may rewrite: it costs the file's
/// size in memory and the time to read it once, and the file can then change freely.
pub struct GgufFile {
    storage: Storage,
    /// The parsed header.
    pub header: Gguf,
    /// Where it came from on disk (`None` for [`GgufFile::from_bytes`]).
    identity: Option<crate::prepared::FileIdentity>,
}

impl GgufFile {
    /// Maps and parses the file at `path` (a regular file; anything else is refused without
    /// blocking). See the type's documentation for the truncation hazard.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        let path = path.as_ref();
        let file = open_regular(path)?;
        // SAFETY: `Mmap::map` requires that the file is not modified or truncated while mapped
        // (that would be undefined behaviour for the `&[u8]` we hand out; in practice a read
        // past a truncated end raises SIGBUS). Model files are read-only inputs; like every
        // mmap-based loader (llama.cpp included) we document that the file must not be
        // rewritten while the engine runs, and offer `GgufFile::read` where that cannot be
        // promised.
        let map =
            unsafe { memmap2::Mmap::map(&file) }.map_err(|e| OpenError::Io(path.into(), e))?;
        let header = Gguf::parse(&map).map_err(|e| OpenError::Parse(path.into(), e))?;
        Ok(Self {
            storage: Storage::Mapped(map),
            header,
            identity: crate::prepared::FileIdentity::of(path, &file).ok(),
        })
    }

    /// Reads the file at `path` into memory ([`READ_ALIGNMENT`]-aligned) and parses it, if
    /// its size fits in the machine's available memory ([`MemoryBudget::available`]). Immune
    /// to the file changing afterwards (see the type's documentation).
    pub fn read(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::read_with(path, &MemoryBudget::available())
    }

    /// [`GgufFile::read`] with the file's size checked against `budget` before the buffer is
    /// allocated.
    pub fn read_with(path: impl AsRef<Path>, budget: &MemoryBudget) -> Result<Self, OpenError> {
        use std::io::Read;
        let path = path.as_ref();
        let mut file = open_regular(path)?;
        let len = file
            .metadata()
            .map_err(|e| OpenError::Io(path.into(), e))?
            .len();
        len.checked_add(READ_ALIGNMENT as u64 - 1)
            .ok_or(BudgetError::Overflow { what: "model file" })
            .and_then(|n| budget.check("model file", n))
            .map_err(|e| OpenError::Memory(path.into(), e))?;
        let mut bytes = usize::try_from(len)
            .ok()
            .and_then(AlignedBytes::zeroed)
            .ok_or_else(|| {
                OpenError::Memory(path.into(), BudgetError::Overflow { what: "model file" })
            })?;
        // A file that shrank since `metadata` fails here (UnexpectedEof) instead of parsing as
        // truncated zeros.
        file.read_exact(bytes.as_mut_slice())
            .map_err(|e| OpenError::Io(path.into(), e))?;
        let header = Gguf::parse(bytes.as_slice()).map_err(|e| OpenError::Parse(path.into(), e))?;
        Ok(Self {
            storage: Storage::Owned(bytes),
            header,
            identity: crate::prepared::FileIdentity::of(path, &file).ok(),
        })
    }

    /// Copies `data` (a whole GGUF file) into an aligned buffer and parses it: the loader's
    /// entry for files that are not on disk (fuzzing, tests, embedded models).
    pub fn from_bytes(data: &[u8]) -> Result<Self, GgufError> {
        let mut bytes =
            AlignedBytes::zeroed(data.len()).ok_or(GgufError::Memory(BudgetError::Overflow {
                what: "GGUF bytes",
            }))?;
        bytes.as_mut_slice().copy_from_slice(data);
        let header = Gguf::parse(bytes.as_slice())?;
        Ok(Self {
            storage: Storage::Owned(bytes),
            header,
            identity: None,
        })
    }

    /// Whether the file is memory-mapped ([`GgufFile::open`]) rather than held in memory.
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped(_))
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Mapped(m) => m,
            Storage::Owned(b) => b.as_slice(),
        }
    }

    /// The file's identity on disk (path, size, modification time, inode), taken when it was
    /// opened; `None` for [`GgufFile::from_bytes`]. The prepared-weights cache keys on it.
    pub fn identity(&self) -> Option<&crate::prepared::FileIdentity> {
        self.identity.as_ref()
    }

    /// [`crate::prepared::hash64`] of the header and tensor table (bytes before the data).
    pub fn header_hash(&self) -> u64 {
        let end = usize::try_from(self.header.data_offset)
            .unwrap_or(usize::MAX)
            .min(self.bytes().len());
        crate::prepared::hash64(&self.bytes()[..end], 0x6767_7566)
    }

    /// The byte range of `part` in the file, when it is a sub-slice of [`GgufFile::bytes`].
    pub fn range_of(&self, part: &[u8]) -> Option<std::ops::Range<usize>> {
        let all = self.bytes();
        let start = (part.as_ptr() as usize).checked_sub(all.as_ptr() as usize)?;
        let end = start.checked_add(part.len())?;
        (end <= all.len()).then_some(start..end)
    }

    /// Gives back the resident pages of a mapped file's bytes `range` (the whole pages inside
    /// it): they stay in the page cache and come back on the next read, but stop counting in
    /// this process's resident memory. A loader calls it once a weight's prepared copy has
    /// replaced its source. No effect on a file read into memory.
    pub fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Storage::Mapped(m) = &self.storage {
            // SAFETY: sysconf reads a system constant; no memory-safety preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .unwrap_or(4096)
                .max(1);
            let base = m.as_ptr() as usize;
            let lo = (base + range.start).div_ceil(page) * page - base;
            let hi = ((base + range.end.min(m.len())) / page * page).saturating_sub(base);
            if lo < hi {
                // SAFETY: MADV_DONTNEED on a read-only shared file mapping only drops this
                // process's page-table entries: the next read faults the same file bytes back
                // in from the page cache, so every `&[u8]` into the map stays valid and keeps
                // its contents. The range lies inside the map (clamped above).
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, lo, hi - lo)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    /// The data of tensor `name`, with its info.
    pub fn tensor(&self, name: &str) -> Option<(&TensorInfo, &[u8])> {
        let t = self.header.tensor(name)?;
        Some((t, self.header.tensor_data(self.bytes(), t)?))
    }
}
