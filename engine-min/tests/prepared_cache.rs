//! The prepared-weights cache (`src/prepared.rs`, `src/backend/prepare.rs`; issue 33.1).
//!
//! Through the engine on a tiny model file: the first start writes the cache file (cold),
//! the second maps it (warm), and both give the logits of preparing in memory bit for bit
//! (the same packed bytes); every bad cache — truncated, a data byte or a header byte
//! changed, not a cache at all, the model rewritten (size/time) or its header changed at the
//! same size and time — is detected, said in a note, rebuilt, and the run's logits are still
//! the reference's; an unwritable cache location prepares in memory with a note.
//!
//! Directly on `prepared::load_or_prepare`: a layout-version change and another set of
//! pieces are refused too (the file name does not carry them), and a failing packer leaves no
//! file behind.

mod synth;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine_min::backend::CpuKernel;
use engine_min::compose::{self, ComposeOptions, PlanChoice};
use engine_min::engine::{Engine, EngineOptions};
use engine_min::model::Model;
use engine_min::prepared::{self, CacheSetting, Outcome, Piece};
use hetero_sme::ThreadPool;

/// A fresh directory under the target's tmp dir.
fn tmp_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("prepared-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Logits of a 5-token prompt on the CPU plan with `kernel`, the cache as `setting`; and what
/// preparing did.
fn run(
    model: &Path,
    setting: &CacheSetting,
    kernel: CpuKernel,
) -> (Vec<f32>, Outcome, Vec<String>) {
    let model = Arc::new(Model::load(model).expect("model"));
    let opts = ComposeOptions {
        plan: PlanChoice::Cpu,
        threads: 2,
        kernel,
        max_batch: 8,
        prepared: setting.clone(),
        ..ComposeOptions::default()
    };
    let c = compose::executor(&model, &opts).expect("compose");
    let report = c.exec.prepare_report().clone();
    let mut e = Engine::new(
        Arc::clone(&model),
        c.exec,
        EngineOptions {
            context: 16,
            ..Default::default()
        },
    )
    .unwrap();
    let mut logits = vec![f32::NAN; model.config.vocab];
    e.forward(&[1, 2, 3, 4, 5], &mut logits).expect("forward");
    (logits, report.outcome.expect("prepared"), report.notes)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The one cache file in `dir`.
fn cache_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "prepared"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// Sets `path`'s modification time to `t` (ns since the epoch), as if it had not changed.
fn set_mtime(path: &Path, t: u64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let ts = libc::timespec {
        tv_sec: (t / 1_000_000_000) as libc::time_t,
        tv_nsec: (t % 1_000_000_000) as libc::c_long,
    };
    let times = [ts, ts];
    // SAFETY: a valid C path and two timespecs, as utimensat reads them.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0);
}

fn mtime_ns(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Runs with a damaged cache: the note names the cache and `why`, the file is rebuilt (the
/// next run maps it without a note), and the logits stay the reference's.
fn damaged(model: &Path, dir: &Path, kernel: CpuKernel, reference: &[f32], why: &str) {
    let setting = CacheSetting::Dir(dir.to_path_buf());
    let (l, o, notes) = run(model, &setting, kernel);
    assert!(matches!(o, Outcome::Written(_)), "{why}: {o:?}");
    assert_eq!(notes.len(), 1, "{why}: {notes:?}");
    assert!(
        notes[0].contains("is stale") && notes[0].contains(why) && notes[0].contains("rebuilt"),
        "{why}: {}",
        notes[0]
    );
    assert_eq!(bits(&l), bits(reference), "{why}: logits after the rebuild");
    let (l, o, notes) = run(model, &setting, kernel);
    assert!(matches!(o, Outcome::Mapped(_)), "{why}: {o:?}");
    assert!(notes.is_empty(), "{why}: {notes:?}");
    assert_eq!(
        bits(&l),
        bits(reference),
        "{why}: logits from the rebuilt file"
    );
}

#[test]
fn cold_then_warm_equal_memory_and_every_bad_cache_is_rebuilt() {
    let dir = tmp_dir("engine");
    let model = dir.join("tiny.gguf");
    std::fs::write(&model, synth::tiny_llama()).unwrap();
    let cache = dir.join("cache");
    let setting = CacheSetting::Dir(cache.clone());
    // Both packed forms' kernels (int8 GEMM; GEMV + int8) and the f32 one.
    for kernel in [CpuKernel::Int8, CpuKernel::Sme, CpuKernel::Portable] {
        let _ = std::fs::remove_dir_all(&cache);
        let (reference, o, notes) = run(&model, &CacheSetting::Off, kernel);
        assert_eq!(o, Outcome::Memory);
        assert!(notes.is_empty());
        assert!(reference.iter().all(|x| x.is_finite()));
        // Cold: packed into the cache file.
        let (l, o, notes) = run(&model, &setting, kernel);
        assert!(
            matches!(&o, Outcome::Written(p) if p.starts_with(&cache)),
            "{o:?}"
        );
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(bits(&l), bits(&reference), "{kernel:?} cold");
        // Warm: mapped.
        let (l, o, notes) = run(&model, &setting, kernel);
        assert!(matches!(o, Outcome::Mapped(_)), "{o:?}");
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(bits(&l), bits(&reference), "{kernel:?} warm");
        let file = cache_file(&cache);
        let len = std::fs::metadata(&file).unwrap().len();

        // Truncated.
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(len - 100).unwrap();
        drop(f);
        damaged(&model, &cache, kernel, &reference, "truncated");
        // One data byte changed (the last page holds packed data).
        let mut b = std::fs::read(&file).unwrap();
        let at = b.len() - 10;
        b[at] ^= 0x40;
        std::fs::write(&file, &b).unwrap();
        damaged(
            &model,
            &cache,
            kernel,
            &reference,
            "does not match its checksum",
        );
        // One header byte changed (a piece's description).
        let mut b = std::fs::read(&file).unwrap();
        b[8 * 30] ^= 1;
        std::fs::write(&file, &b).unwrap();
        damaged(&model, &cache, kernel, &reference, "header checksum");
        // Not a cache at all.
        std::fs::write(&file, vec![7u8; 5000]).unwrap();
        damaged(
            &model,
            &cache,
            kernel,
            &reference,
            "not a prepared-weights file",
        );
        std::fs::write(&file, b"x").unwrap();
        damaged(&model, &cache, kernel, &reference, "truncated");
    }

    // The model rewritten (another file at the same path: new time, maybe inode).
    let kernel = CpuKernel::Int8;
    let _ = std::fs::remove_dir_all(&cache);
    run(&model, &setting, kernel);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let bytes = std::fs::read(&model).unwrap();
    std::fs::remove_file(&model).unwrap();
    std::fs::write(&model, &bytes).unwrap();
    let (reference, ..) = run(&model, &CacheSetting::Off, kernel);
    damaged(&model, &cache, kernel, &reference, "another model file");
    // Its header changed at the same size, inode and time (RoPE base 10000 -> 10001).
    let t = mtime_ns(&model);
    let mut b = std::fs::read(&model).unwrap();
    synth::set_number(&mut b, "llama.rope.freq_base", 10_001.0);
    assert_eq!(b.len(), bytes.len());
    {
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&model)
            .unwrap();
        f.seek(std::io::SeekFrom::Start(0)).unwrap();
        f.write_all(&b).unwrap();
    }
    set_mtime(&model, t);
    assert_eq!(mtime_ns(&model), t);
    let (reference2, ..) = run(&model, &CacheSetting::Off, kernel);
    assert_ne!(bits(&reference2), bits(&reference), "the RoPE base matters");
    damaged(&model, &cache, kernel, &reference2, "GGUF header differs");

    // Unwritable: the cache directory would be under a regular file.
    let blocked = CacheSetting::Dir(model.join("cache"));
    let (l, o, notes) = run(&model, &blocked, kernel);
    assert_eq!(o, Outcome::Memory);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("cannot write the prepared-weights cache")
            && notes[0].contains("prepared in memory"),
        "{}",
        notes[0]
    );
    assert_eq!(bits(&l), bits(&reference2));
    let _ = std::fs::remove_dir_all(&dir);
}

fn identity() -> prepared::FileIdentity {
    prepared::FileIdentity {
        path: PathBuf::from("/models/x.gguf"),
        len: 1000,
        mtime_ns: 5,
        ino: 6,
        dev: 7,
    }
}

/// Packs every section with bytes derived from its piece and offset.
fn fill(arena: &prepared::ArenaMut<'_>, offsets: &[[usize; 3]], pieces: &[Piece]) {
    for (p, o) in pieces.iter().zip(offsets) {
        for (s, (&at, &len)) in o.iter().zip(&p.sections).enumerate() {
            // SAFETY: sections of distinct pieces and indices never overlap (the layout).
            let b = unsafe { arena.range(at, len) }.unwrap();
            for (i, x) in b.iter_mut().enumerate() {
                *x = (p.desc[0] as usize + 3 * s + i) as u8;
            }
        }
    }
}

#[test]
fn layout_versions_and_pieces_are_keys_and_a_failed_pack_leaves_nothing() {
    let dir = tmp_dir("direct");
    let pool = ThreadPool::new(2).unwrap();
    let setting = CacheSetting::Dir(dir.clone());
    let id = identity();
    let key = |v: u64| prepared::Key {
        model: &id,
        header_hash: 9,
        variant: "sme-int8",
        versions: [1, v, 1],
    };
    let pieces = vec![
        Piece {
            desc: [1, 2, 3, 4, 5, 6],
            sections: [100, 7, 0],
        },
        Piece {
            desc: [7, 2, 3, 4, 5, 6],
            sections: [0, 0, (5 << 20) + 3],
        },
    ];
    let pack = |a: &prepared::ArenaMut<'_>, o: &[[usize; 3]]| {
        fill(a, o, &pieces);
        Ok(())
    };
    let p = prepared::load_or_prepare(&setting, Some(&key(1)), &pieces, &pool, &pack).unwrap();
    assert!(matches!(p.outcome, Outcome::Written(_)));
    let written: Vec<u8> = (*p.bytes).as_ref().to_vec();
    let q = prepared::load_or_prepare(&setting, Some(&key(1)), &pieces, &pool, &pack).unwrap();
    assert!(matches!(q.outcome, Outcome::Mapped(_)));
    assert_eq!((*q.bytes).as_ref(), &written[..]);
    assert_eq!(q.offsets, p.offsets);
    for o in q.offsets.iter().flatten() {
        assert_eq!(o % prepared::ALIGN, 0);
        assert_eq!(
            ((*q.bytes).as_ref().as_ptr() as usize + o) % prepared::ALIGN,
            0
        );
    }
    // Another int8 layout version: same file name, refused.
    let r = prepared::load_or_prepare(&setting, Some(&key(2)), &pieces, &pool, &pack).unwrap();
    assert!(matches!(r.outcome, Outcome::Written(_)));
    assert!(
        r.notes.len() == 1 && r.notes[0].contains("another kernel or layout"),
        "{:?}",
        r.notes
    );
    // Another set of pieces under this file's name: refused.
    let name = prepared::file_name(&key(2), &pieces);
    let mut other = pieces.clone();
    other[1].sections[2] += 64;
    let other_name = prepared::file_name(&key(2), &other);
    assert_ne!(name, other_name, "the pieces are in the name");
    std::fs::copy(dir.join(&name), dir.join(&other_name)).unwrap();
    let pack2 = |a: &prepared::ArenaMut<'_>, o: &[[usize; 3]]| {
        fill(a, o, &other);
        Ok(())
    };
    let s = prepared::load_or_prepare(&setting, Some(&key(2)), &other, &pool, &pack2).unwrap();
    assert!(
        s.notes.len() == 1 && s.notes[0].contains("another split of the weights"),
        "{:?}",
        s.notes
    );
    // A packer that fails: an error, and no temporary file left.
    let bad = |_: &prepared::ArenaMut<'_>, _: &[[usize; 3]]| {
        Err(engine_min::backend::BackendError::Shape("test failure"))
    };
    let mut third = pieces.clone();
    third[0].desc[0] = 99;
    assert!(prepared::load_or_prepare(&setting, Some(&key(2)), &third, &pool, &bad).is_err());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // No key (weights not from a file): memory, nothing written.
    let m = prepared::load_or_prepare(&setting, None, &pieces, &pool, &pack).unwrap();
    assert_eq!(m.outcome, Outcome::Memory);
    let _ = std::fs::remove_dir_all(&dir);
}
