//! The prepared-weights cache: a backend's packed forms of a model's weights, written once to
//! a file and mapped at the next start, so that the packed copy *is* the mapped file (no
//! second copy in memory, nothing repacked).
//!
//! **Where.** One directory, `$HETERO_CACHE/prepared/` (default `~/.cache/hetero/prepared/`;
//! `--prepared-cache DIR|off`), rather than beside the model: model directories are often
//! read-only (system images, app bundles, shared or network model stores), a file appearing
//! beside someone's model is a surprise to its owner, and one directory is easy to size and to
//! clear (deleting it is always safe). One file per (model path, prepared pieces, kernel
//! variant): a changed model overwrites its own file instead of adding one.
//!
//! **Keyed and checked.** The header holds the format version, the kernel variant and the
//! kernels' layout versions, the model file's identity (size, modification time, inode, device
//! and a hash of its GGUF header and tensor table), the list of pieces (each weight's place in
//! the model file, shape, type and the byte length of each packed section), a checksum of every
//! 4 MiB block of the data, and a hash of the header itself. At the next start every check
//! runs before a byte of the data is used; a file that fails one (another model, version or
//! kernel; truncated; any byte changed) is a note ("… is stale (…): rebuilt") and is rebuilt.
//! The checksum (a 4-lane multiply–rotate hash, 64-bit) finds accidental damage (a torn write,
//! a flipped bit, a file cut short), not a deliberate forgery: whoever can write the cache
//! directory can write the model too. Verifying it reads the whole file once, in parallel on
//! the pool, which the first token would do anyway.
//!
//! **Written atomically.** The file is prepared in place under a temporary name in the same
//! directory (space reserved first with `posix_fallocate`, so a full disk is an error at the
//! start, never a `SIGBUS` in the middle), its header written last, then renamed over the old
//! name; a crash leaves a temporary file or an old one, and a file torn by a crash after the
//! rename (pages not yet written back) fails its checksum. An unwritable directory (or a
//! file system that cannot reserve space) means preparing in memory, with a note.
//!
//! **The mapped-file hazard** is the model file's (see [`crate::gguf::GgufFile`]): a cache file
//! truncated in place while mapped kills the process with `SIGBUS`; this module only ever
//! replaces files by renaming.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetero_sme::{SharedBytes, ThreadPool as Pool};

use crate::backend::BackendError;

/// Version of this file format (the header's words and the data layout); bump on any change.
pub const FORMAT_VERSION: u64 = 1;
const MAGIC: u64 = u64::from_le_bytes(*b"HETPREPW");
/// Written as a word: a file from a machine of the other byte order reads differently.
const ENDIAN: u64 = 0x0102_0304_0506_0708;
/// Every section starts on this boundary (the kernels' fastest loads, and `Int8Weight`'s
/// requirement).
pub const ALIGN: usize = 64;
const PAGE: usize = 4096;
/// Bytes per checksum block.
pub const CHECK_BLOCK: usize = 4 << 20;
/// Words describing a piece (compared word for word at load).
pub const DESC_WORDS: usize = 6;
/// Sections per piece (a weight's packed forms: e.g. int8 quants, int8 scales, GEMV bytes).
pub const SECTIONS: usize = 3;
/// Header words before the pieces.
const FIXED_WORDS: usize = 24;
/// Bytes of the variant name in the header.
const VARIANT_BYTES: usize = 32;

/// Where prepared weights are kept between runs (`--prepared-cache`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum CacheSetting {
    /// Prepared in memory at every start.
    #[default]
    Off,
    /// Files in this directory (created when missing).
    Dir(PathBuf),
}

impl CacheSetting {
    /// The default: `$HETERO_CACHE/prepared`, else `$XDG_CACHE_HOME/hetero/prepared`, else
    /// `$HOME/.cache/hetero/prepared`; [`CacheSetting::Off`] when none of these is set.
    pub fn default_dir() -> Self {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        env("HETERO_CACHE")
            .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("hetero")))
            .or_else(|| env("HOME").map(|p| p.join(".cache").join("hetero")))
            .map_or(Self::Off, |d| Self::Dir(d.join("prepared")))
    }
}

/// What identifies a model file on disk: its canonical path, size, modification time, inode
/// and device (taken when it was opened).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    /// The canonical path (the cache file's name derives from it).
    pub path: PathBuf,
    /// Bytes.
    pub len: u64,
    /// Modification time, ns since the epoch (0 where the platform has none).
    pub mtime_ns: u64,
    /// Inode number (0 off Unix).
    pub ino: u64,
    /// Device number (0 off Unix).
    pub dev: u64,
}

impl FileIdentity {
    /// The identity of the open file `file`, found at `path`.
    pub fn of(path: &Path, file: &std::fs::File) -> std::io::Result<Self> {
        let meta = file.metadata()?;
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64);
        #[cfg(unix)]
        let (ino, dev) = {
            use std::os::unix::fs::MetadataExt;
            (meta.ino(), meta.dev())
        };
        #[cfg(not(unix))]
        let (ino, dev) = (0, 0);
        Ok(Self {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            len: meta.len(),
            mtime_ns,
            ino,
            dev,
        })
    }
}

/// What a cache file is keyed on besides its pieces.
#[derive(Clone, Copy, Debug)]
pub struct Key<'a> {
    /// The model file.
    pub model: &'a FileIdentity,
    /// [`hash64`] of the model's GGUF header and tensor table (bytes `0..data_offset`).
    pub header_hash: u64,
    /// The kernel variant that reads the forms (e.g. `sme-int8`), at most 32 bytes.
    pub variant: &'a str,
    /// The packed layouts' versions (e.g. hetero-sme's `INT8_LAYOUT_VERSION`).
    pub versions: [u64; 3],
}

/// One prepared piece: what it is made from (compared word for word at the next start) and
/// the byte length of each of its sections (0: absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The source's description (its place in the model file, shape, type, forms).
    pub desc: [u64; DESC_WORDS],
    /// Section lengths in bytes.
    pub sections: [usize; SECTIONS],
}

/// How the prepared bytes were obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Mapped from this cache file, every check passed (a warm start).
    Mapped(PathBuf),
    /// Prepared now and written to this cache file (a cold start; the next one maps it).
    Written(PathBuf),
    /// Prepared now in memory: the cache is off, the pieces do not come from a model file, or
    /// the file could not be written (the notes say why).
    Memory,
}

/// Prepared bytes and where each piece's sections are in them.
pub struct Prepared {
    /// The bytes (the mapped cache file, or memory).
    pub bytes: SharedBytes,
    /// Per piece, the byte offset of each section in `bytes` (every one [`ALIGN`]-aligned).
    pub offsets: Vec<[usize; SECTIONS]>,
    /// How they were obtained.
    pub outcome: Outcome,
    /// What the user should be told (a stale file rebuilt, an unwritable directory, ...).
    pub notes: Vec<String>,
    /// Time spent packing (0 on a warm start).
    pub packing: Duration,
    /// Time spent on checksums (computing them cold, verifying them warm).
    pub checking: Duration,
    /// Data bytes.
    pub data_len: usize,
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("outcome", &self.outcome)
            .field("notes", &self.notes)
            .field("pieces", &self.offsets.len())
            .field("data_len", &self.data_len)
            .finish()
    }
}

/// Why a cache file was not used.
#[derive(Debug)]
pub enum Stale {
    /// It could not be opened, read or mapped.
    Io(std::io::Error),
    /// Shorter than its header says (or than a header).
    Truncated {
        /// Bytes found.
        len: u64,
        /// Bytes the header (or a header) needs.
        need: u64,
    },
    /// Not a prepared-weights file, or from a machine of the other byte order.
    NotACache,
    /// Written by another version of this format.
    Version(u64),
    /// The header's own hash does not match (it was changed or damaged).
    Header,
    /// Made from another model file, or the model changed since (what differs).
    Model(&'static str),
    /// Made for another kernel variant or layout version.
    Variant(String),
    /// Made for another set of pieces (another plan's split of the weights).
    Pieces,
    /// A data block's checksum does not match (changed or damaged bytes).
    Checksum {
        /// The block.
        block: usize,
        /// Its first byte in the file.
        at: u64,
    },
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "unreadable ({e})"),
            Self::Truncated { len, need } => {
                write!(f, "truncated ({len} bytes, its header needs {need})")
            }
            Self::NotACache => f.write_str("not a prepared-weights file of this machine"),
            Self::Version(v) => write!(f, "format version {v}, this build writes {FORMAT_VERSION}"),
            Self::Header => f.write_str("its header checksum does not match"),
            Self::Model(what) => write!(f, "made from another model file ({what} differs)"),
            Self::Variant(v) => write!(f, "made for another kernel or layout ({v})"),
            Self::Pieces => f.write_str("made for another split of the weights"),
            Self::Checksum { block, at } => write!(
                f,
                "data block {block} (bytes {at}..) does not match its checksum"
            ),
        }
    }
}

/// The data being prepared, handed to the packing tasks in disjoint ranges.
pub struct ArenaMut<'a> {
    ptr: *mut u8,
    len: usize,
    _borrow: std::marker::PhantomData<&'a mut [u8]>,
}

// SAFETY: the arena is a raw view of one exclusively borrowed byte buffer; tasks on other
// threads only obtain ranges through `range`, whose contract forbids overlapping live ranges.
unsafe impl Sync for ArenaMut<'_> {}
// SAFETY: as above.
unsafe impl Send for ArenaMut<'_> {}

impl<'a> ArenaMut<'a> {
    fn new(bytes: &'a mut [u8]) -> Self {
        Self {
            ptr: bytes.as_mut_ptr(),
            len: bytes.len(),
            _borrow: std::marker::PhantomData,
        }
    }

    /// Bytes `at..at + len`, or `None` past the end.
    ///
    /// # Safety
    /// While the returned slice lives, no other slice from this arena may overlap it (each
    /// packing task takes its own range).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, at: usize, len: usize) -> Option<&mut [u8]> {
        let end = at.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `at..end` lies inside the exclusively borrowed buffer (checked above); the
        // caller guarantees no overlapping slice is live.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), len) })
    }
}

/// The packing callback: fills every piece's sections (offsets into the arena as given);
/// it spreads its own work over the pool.
pub type Pack<'p> = dyn Fn(&ArenaMut<'_>, &[[usize; SECTIONS]]) -> Result<(), BackendError> + 'p;

/// A 64-bit hash of `data` (four lanes of multiply–rotate over 8-byte words, then a
/// finalizer): fast enough to check gigabytes at memory speed, and any change of one byte
/// changes it (with probability 1 − 2⁻⁶⁴ for random damage). Our own, not a standard one.
pub fn hash64(data: &[u8], seed: u64) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    let mut acc = [
        seed.wrapping_add(P1).wrapping_add(P2),
        seed.wrapping_add(P2),
        seed,
        seed.wrapping_sub(P1),
    ];
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            let w = u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
            *a = a
                .wrapping_add(w.wrapping_mul(P2))
                .rotate_left(31)
                .wrapping_mul(P1);
        }
    }
    let mut h = acc[0]
        .rotate_left(1)
        .wrapping_add(acc[1].rotate_left(7))
        .wrapping_add(acc[2].rotate_left(12))
        .wrapping_add(acc[3].rotate_left(18));
    for a in acc {
        h = (h ^ a.wrapping_mul(P2).rotate_left(31).wrapping_mul(P1))
            .wrapping_mul(P1)
            .wrapping_add(P3);
    }
    let rest = chunks.remainder();
    for w in rest.chunks(8) {
        let mut b = [0u8; 8];
        b[..w.len()].copy_from_slice(w);
        h ^= u64::from_le_bytes(b)
            .wrapping_mul(P2)
            .rotate_left(31)
            .wrapping_mul(P1);
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P3);
    }
    h ^= data.len() as u64;
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

fn words_hash(words: &[u64]) -> u64 {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    hash64(&bytes, 0x7072_6570)
}

fn align_up(x: usize, a: usize) -> Option<usize> {
    x.checked_add(a - 1).map(|v| v / a * a)
}

/// Offsets of every section from the data's start, and the data length.
fn layout(pieces: &[Piece]) -> Result<(Vec<[usize; SECTIONS]>, usize), BackendError> {
    let mut at = 0usize;
    let mut offsets = Vec::with_capacity(pieces.len());
    let over = || BackendError::Shape("prepared weights exceed the address space");
    for p in pieces {
        let mut o = [0; SECTIONS];
        for (slot, &len) in o.iter_mut().zip(&p.sections) {
            *slot = at;
            at = align_up(at.checked_add(len).ok_or_else(over)?, ALIGN).ok_or_else(over)?;
        }
        offsets.push(o);
    }
    Ok((offsets, at))
}

fn pieces_hash(pieces: &[Piece]) -> u64 {
    let w: Vec<u64> = pieces
        .iter()
        .flat_map(|p| {
            p.desc
                .iter()
                .copied()
                .chain(p.sections.iter().map(|&s| s as u64))
        })
        .collect();
    words_hash(&w)
}

fn variant_words(v: &str) -> [u64; VARIANT_BYTES / 8] {
    let mut b = [0u8; VARIANT_BYTES];
    let n = v.len().min(VARIANT_BYTES);
    b[..n].copy_from_slice(&v.as_bytes()[..n]);
    std::array::from_fn(|i| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8])))
}

/// The cache file's name for `key` and `pieces` in `dir`: the model's file name (its safe
/// characters), a hash of its canonical path and of the pieces, and the variant.
pub fn file_name(key: &Key<'_>, pieces: &[Piece]) -> String {
    let stem: String = key
        .model
        .path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    let path_hash = hash64(key.model.path.as_os_str().as_encoded_bytes(), 1);
    let variant: String = key
        .variant
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    format!(
        "{stem}.{:016x}.{variant}.prepared",
        path_hash ^ pieces_hash(pieces).rotate_left(17)
    )
}

/// The header's words (everything but the trailing header hash).
fn header_words(key: &Key<'_>, pieces: &[Piece], header_len: usize, data: &[u64]) -> Vec<u64> {
    let mut w = Vec::with_capacity(FIXED_WORDS + pieces.len() * (DESC_WORDS + SECTIONS));
    w.extend([
        MAGIC,
        FORMAT_VERSION,
        ENDIAN,
        header_len as u64,
        0, // data length, set below
        key.model.len,
        key.model.mtime_ns,
        key.model.ino,
        key.model.dev,
        key.header_hash,
    ]);
    w.extend(variant_words(key.variant));
    w.extend(key.versions);
    w.extend([
        pieces_hash(pieces),
        pieces.len() as u64,
        CHECK_BLOCK as u64,
        data.len() as u64,
        0,
        0,
        0,
    ]);
    debug_assert_eq!(w.len(), FIXED_WORDS);
    for p in pieces {
        w.extend(p.desc);
        w.extend(p.sections.iter().map(|&s| s as u64));
    }
    w.extend(data);
    w
}

fn header_len_for(pieces: usize, blocks: usize) -> Option<usize> {
    let words = FIXED_WORDS + pieces * (DESC_WORDS + SECTIONS) + blocks + 1;
    align_up(words.checked_mul(8)?, PAGE)
}

/// Checksums of every [`CHECK_BLOCK`] of `data`, computed on the pool.
fn block_hashes(pool: &Pool, data: &[u8]) -> Vec<u64> {
    let n = data.len().div_ceil(CHECK_BLOCK);
    let mut out = vec![0u64; n];
    // One task per block (chunks of one word): `run_chunks_mut` only fails on a zero chunk.
    let _ = pool.run_chunks_mut(&mut out, 1, &|b, _, o: &mut [u64]| {
        let end = ((b + 1) * CHECK_BLOCK).min(data.len());
        o[0] = hash64(&data[b * CHECK_BLOCK..end], b as u64);
    });
    out
}

/// The prepared bytes for `pieces`: mapped from the cache file when `setting` and `key` allow
/// and the file passes every check; otherwise packed now by `pack` (into the cache file when
/// it can be written, else into memory).
pub fn load_or_prepare(
    setting: &CacheSetting,
    key: Option<&Key<'_>>,
    pieces: &[Piece],
    pool: &Pool,
    pack: &Pack<'_>,
) -> Result<Prepared, BackendError> {
    let (offsets, data_len) = layout(pieces)?;
    let blocks = data_len.div_ceil(CHECK_BLOCK);
    let header_len = header_len_for(pieces.len(), blocks)
        .ok_or(BackendError::Shape("prepared-weights header"))?;
    let mut notes = Vec::new();
    let target = match (setting, key) {
        (CacheSetting::Dir(dir), Some(key)) => Some((dir.join(file_name(key, pieces)), key)),
        _ => None,
    };
    if let Some((path, key)) = &target {
        let t0 = Instant::now();
        match open_valid(path, key, pieces, header_len, data_len, pool) {
            Ok(Some(map)) => {
                let bytes: SharedBytes = Arc::new(map);
                let shifted = offsets.iter().map(|o| o.map(|x| x + header_len)).collect();
                return Ok(Prepared {
                    bytes,
                    offsets: shifted,
                    outcome: Outcome::Mapped(path.clone()),
                    notes,
                    packing: Duration::ZERO,
                    checking: t0.elapsed(),
                    data_len,
                });
            }
            Ok(None) => {}
            Err(why) => notes.push(format!(
                "prepared-weights cache {} is stale: {why}; rebuilt",
                path.display()
            )),
        }
    }
    // Cold: into a temporary cache file when one can be made, else into memory.
    let file = match &target {
        Some((path, _)) => match create_temp(path, header_len + data_len) {
            Ok(f) => Some(f),
            Err(e) => {
                notes.push(format!(
                    "cannot write the prepared-weights cache {} ({e}): prepared in memory",
                    path.display()
                ));
                None
            }
        },
        None => None,
    };
    let t0 = Instant::now();
    match file {
        Some((tmp, mut map)) => {
            let (key, path) = target
                .as_ref()
                .map(|(p, k)| (*k, p.clone()))
                .ok_or(BackendError::Shape("cache target"))?;
            if let Err(e) = pack(&ArenaMut::new(&mut map[header_len..]), &offsets) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            let packing = t0.elapsed();
            let t1 = Instant::now();
            let hashes = block_hashes(pool, &map[header_len..]);
            let mut words = header_words(key, pieces, header_len, &hashes);
            words[4] = data_len as u64;
            let h = words_hash(&words);
            words.push(h);
            for (dst, w) in map[..header_len].chunks_exact_mut(8).zip(&words) {
                dst.copy_from_slice(&w.to_le_bytes());
            }
            let checking = t1.elapsed();
            let outcome = match std::fs::rename(&tmp, &path) {
                Ok(()) => Outcome::Written(path.clone()),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    notes.push(format!(
                        "cannot rename the prepared-weights cache into {} ({e}): used from \
                         memory this time",
                        path.display()
                    ));
                    Outcome::Memory
                }
            };
            let map = map.make_read_only().map_err(io_err)?;
            let bytes: SharedBytes = Arc::new(map);
            Ok(Prepared {
                bytes,
                offsets: offsets.iter().map(|o| o.map(|x| x + header_len)).collect(),
                outcome,
                notes,
                packing,
                checking,
                data_len,
            })
        }
        None => {
            // Anonymous memory: page-aligned, populated in one call (no fault per page).
            let mut map = memmap2::MmapOptions::new()
                .len(data_len.max(1))
                .populate()
                .map_anon()
                .map_err(io_err)?;
            pack(&ArenaMut::new(&mut map[..data_len]), &offsets)?;
            let packing = t0.elapsed();
            let map = map.make_read_only().map_err(io_err)?;
            Ok(Prepared {
                bytes: Arc::new(map),
                offsets,
                outcome: Outcome::Memory,
                notes,
                packing,
                checking: Duration::ZERO,
                data_len,
            })
        }
    }
}

fn io_err(e: std::io::Error) -> BackendError {
    BackendError::Prepare(format!("cannot map memory for the prepared weights: {e}"))
}

/// A temporary file beside `path` of `len` bytes, its space reserved, mapped for writing.
fn create_temp(path: &Path, len: usize) -> std::io::Result<(PathBuf, memmap2::MmapMut)> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    let made = (|| {
        reserve(&file, len)?;
        // SAFETY: the file is ours alone (created just now under a fresh name, mode 0644 but
        // not yet renamed into place, so no reader maps it); nothing truncates it while
        // mapped, and its blocks are reserved (a full disk cannot fault a write). Populated:
        // the kernel maps every page in one call instead of one fault per page as the
        // packers write (a third of a cold start's time went to those faults).
        unsafe { memmap2::MmapOptions::new().populate().map_mut(&file) }
    })();
    match made {
        Ok(m) => Ok((tmp, m)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Sets `file` to `len` bytes with its blocks allocated (`posix_fallocate`), so that writing
/// through a mapping never meets a full disk.
fn reserve(file: &std::fs::File, len: usize) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        let len = libc::off_t::try_from(len)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `posix_fallocate` on an open descriptor of ours, no pointers.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        // No portable reservation: a mapping of a sparse file could fault on a full disk.
        let _ = (file, len);
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}

/// The cache file at `path` mapped, if it exists and passes every check; `Ok(None)` when there
/// is none; the reason when there is one that must not be used.
fn open_valid(
    path: &Path,
    key: &Key<'_>,
    pieces: &[Piece],
    header_len: usize,
    data_len: usize,
    pool: &Pool,
) -> Result<Option<memmap2::Mmap>, Stale> {
    let file = match crate::gguf::open_regular_io(path) {
        Ok(f) => f,
        // No file there (or no directory): a cold start, nothing to say.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(Stale::Io(e)),
    };
    let len = file.metadata().map_err(Stale::Io)?.len();
    let min = (FIXED_WORDS * 8) as u64;
    if len < min {
        return Err(Stale::Truncated { len, need: min });
    }
    // SAFETY: see the module docs: cache files are only ever replaced by renaming, never
    // rewritten in place; a file truncated by someone else while mapped is the documented
    // SIGBUS hazard of every mapped input.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(Stale::Io)?;
    let word = |i: usize| -> Option<u64> {
        map.get(8 * i..8 * i + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    if word(0) != Some(MAGIC) || word(2) != Some(ENDIAN) {
        return Err(Stale::NotACache);
    }
    let version = word(1).unwrap_or(0);
    if version != FORMAT_VERSION {
        return Err(Stale::Version(version));
    }
    let (h_len, d_len) = (word(3).unwrap_or(0), word(4).unwrap_or(0));
    let need = h_len.saturating_add(d_len);
    if len < need || h_len < min {
        return Err(Stale::Truncated { len, need });
    }
    let h_words = usize::try_from(h_len / 8).map_err(|_| Stale::Header)?;
    let n_pieces = usize::try_from(word(FIXED_WORDS - 6).unwrap_or(0)).unwrap_or(usize::MAX);
    let n_blocks = usize::try_from(word(FIXED_WORDS - 4).unwrap_or(0)).unwrap_or(usize::MAX);
    let used = n_pieces
        .checked_mul(DESC_WORDS + SECTIONS)
        .and_then(|x| x.checked_add(FIXED_WORDS + n_blocks + 1))
        .filter(|&u| u <= h_words)
        .ok_or(Stale::Header)?;
    let words: Vec<u64> = (0..used).map(|i| word(i).unwrap_or(0)).collect();
    if words_hash(&words[..used - 1]) != words[used - 1] {
        return Err(Stale::Header);
    }
    // The header is intact: now, is it ours?
    let m = key.model;
    for (i, v, what) in [
        (5, m.len, "size"),
        (6, m.mtime_ns, "modification time"),
        (7, m.ino, "inode"),
        (8, m.dev, "device"),
        (9, key.header_hash, "GGUF header"),
    ] {
        if words[i] != v {
            return Err(Stale::Model(what));
        }
    }
    let vw = variant_words(key.variant);
    if words[10..14] != vw || words[14..17] != key.versions {
        let found: Vec<u8> = words[10..14]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .take_while(|&b| b != 0)
            .collect();
        return Err(Stale::Variant(format!(
            "kernel `{}`, layouts {:?}; this run needs `{}`, {:?}",
            String::from_utf8_lossy(&found),
            &words[14..17],
            key.variant,
            key.versions
        )));
    }
    let expect = header_words(key, pieces, header_len, &[]);
    let p_end = FIXED_WORDS + pieces.len() * (DESC_WORDS + SECTIONS);
    if n_pieces != pieces.len()
        || words[17] != expect[17]
        || words.get(FIXED_WORDS..p_end) != expect.get(FIXED_WORDS..p_end)
    {
        return Err(Stale::Pieces);
    }
    if h_len != header_len as u64
        || d_len != data_len as u64
        || n_blocks != data_len.div_ceil(CHECK_BLOCK)
    {
        return Err(Stale::Pieces);
    }
    if len != need {
        return Err(Stale::Truncated { len, need });
    }
    // Every data block against its checksum, in parallel.
    let data = &map[header_len..header_len + data_len];
    let stored = &words[p_end..p_end + n_blocks];
    let bad = AtomicUsize::new(usize::MAX);
    pool.run(n_blocks, &|b, _| {
        let end = ((b + 1) * CHECK_BLOCK).min(data.len());
        if hash64(&data[b * CHECK_BLOCK..end], b as u64) != stored[b] {
            bad.fetch_min(b, Ordering::Relaxed);
        }
    });
    let b = bad.into_inner();
    if b != usize::MAX {
        return Err(Stale::Checksum {
            block: b,
            at: (header_len + b * CHECK_BLOCK) as u64,
        });
    }
    Ok(Some(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash64_sees_every_byte_and_the_length() {
        let base: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let h = hash64(&base, 0);
        for at in [0, 1, 31, 32, 500, 991, 999] {
            let mut v = base.clone();
            v[at] ^= 1;
            assert_ne!(hash64(&v, 0), h, "byte {at}");
        }
        assert_ne!(hash64(&base[..999], 0), h);
        assert_ne!(hash64(&base, 1), h);
        let zeros = vec![0u8; 64];
        assert_ne!(hash64(&zeros[..32], 0), hash64(&zeros, 0));
    }

    #[test]
    fn layout_aligns_every_section() {
        let p = |a, b, c| Piece {
            desc: [0; DESC_WORDS],
            sections: [a, b, c],
        };
        let (o, len) = layout(&[p(100, 0, 7), p(64, 65, 1)]).unwrap();
        assert_eq!(o, vec![[0, 128, 128], [192, 256, 384]]);
        assert_eq!(len, 448);
        assert!(o.iter().flatten().all(|x| x % ALIGN == 0));
    }
}
