//! Decode at memory speed: the int8 GEMM at M = 1, 2, 4 on SmolLM2-135M's matmul shapes (and
//! 4096×4096; `--shapes llama`: Llama-3.2-1B's and Llama-3-8B's), any of its eight types (random
//! quants at the real shape: they time the same), against a read-bandwidth probe over the same packed bytes, at each thread count
//! given, through `Int8Plan` + `StealState` work stealing (the probe: the same groups cut into
//! the same number of tiles, each tile summing its groups' quant and scale bytes with 64-byte
//! loads, 32-byte ones without AVX-512). Prints achieved GB/s of packed weight (quants + scales) and the ratio to the probe;
//! a "layer" line sums one decoder layer's seven matmuls (q, k, v, o, gate, up, down).
//! Activations are quantized once before timing (the probe reads no activations either).
//!
//! `cargo run --release -p hetero-sme --example int8_decode -- [THREADS...] [--format TYPE] [--kernel NAME] [--shapes smol|llama] [--m 1,2,4] [--default-tiles]`
//! (default threads 1 2; format q4_1, SmolLM2's; kernel: `Int8Kernel::best()`, or a name from
//! `Int8Kernel::available()`, or `amx-all`: AMX-INT8 for every row chunk). Plans are cut
//! for the thread count (`Int8Plan::with_workers`; `--default-tiles`: not). Medians of a number
//! of calls sized to ~40 ms per case; threads beyond the cores oversubscribe.

/// The format names this file was written with, now hetero-sme's one vocabulary.
use hetero_sme::GgmlType as Int8Format;
use hetero_sme::*;

#[path = "support/spin_pool.rs"]
mod spin_pool;
use spin_pool::{median, time_parallel};

/// A GGUF weight of `n` rows × `k` values of `format` from pseudo-random bytes, its FP16 scale
/// fields set to small normal values (random bits there could be NaN; the timing is the same),
/// repacked into the int8 GEMM's form.
fn weight(format: Int8Format, n: usize, k: usize) -> Int8Weight {
    let (be, bb) = format.block().expect("a block type");
    let mut bytes = vec![0u8; n * k / be * bb];
    let mut st = 0x9e37_79b9_7f4a_7c15u64;
    for c in bytes.chunks_mut(8) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        c.copy_from_slice(&st.to_le_bytes()[..c.len()]);
    }
    // Byte offsets of each block's FP16 fields: d (and m / dmin).
    let f16s: &[usize] = match format {
        Int8Format::Q4_0 | Int8Format::Q5_0 | Int8Format::Q8_0 => &[0],
        Int8Format::Q4_1 | Int8Format::Q5_1 | Int8Format::Q4K | Int8Format::Q5K => &[0, 2],
        Int8Format::Q6K => &[208],
        other => panic!("no {other} weight in this example"),
    };
    for blk in bytes.chunks_mut(bb) {
        for &o in f16s {
            blk[o..o + 2].copy_from_slice(&0x2c00u16.to_le_bytes());
        }
    }
    Int8Weight::pack_gguf(format, &bytes, n, k).expect("shape")
}

/// Sums `len` bytes at `p` (64-byte loads, four chains; the tail byte by byte).
///
/// # Safety
/// `p` readable for `len` bytes; AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_sum512(p: *const u8, len: usize) -> u64 {
    use core::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut i = 0;
    // SAFETY: every load reads 64 bytes below p + len.
    unsafe {
        while i + 256 <= len {
            for (c, a) in acc.iter_mut().enumerate() {
                let v = _mm512_loadu_si512(p.add(i + 64 * c).cast());
                *a = _mm512_add_epi64(*a, v);
            }
            i += 256;
        }
        while i + 64 <= len {
            acc[0] = _mm512_add_epi64(acc[0], _mm512_loadu_si512(p.add(i).cast()));
            i += 64;
        }
        let v = _mm512_add_epi64(
            _mm512_add_epi64(acc[0], acc[1]),
            _mm512_add_epi64(acc[2], acc[3]),
        );
        let mut s = _mm512_reduce_add_epi64(v) as u64;
        for j in i..len {
            s = s.wrapping_add(*p.add(j) as u64);
        }
        s
    }
}

/// As [`read_sum512`] with 32-byte loads (CPUs without AVX-512).
///
/// # Safety
/// `p` readable for `len` bytes; AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn read_sum256(p: *const u8, len: usize) -> u64 {
    use core::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut i = 0;
    // SAFETY: every load reads 32 bytes below p + len.
    unsafe {
        while i + 128 <= len {
            for (c, a) in acc.iter_mut().enumerate() {
                let v = _mm256_loadu_si256(p.add(i + 32 * c).cast());
                *a = _mm256_add_epi64(*a, v);
            }
            i += 128;
        }
        let v = _mm256_add_epi64(
            _mm256_add_epi64(acc[0], acc[1]),
            _mm256_add_epi64(acc[2], acc[3]),
        );
        let mut lanes = [0u64; 4];
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v);
        let mut s = lanes.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        for j in i..len {
            s = s.wrapping_add(*p.add(j) as u64);
        }
        s
    }
}

/// Sums `len` bytes at `p` with the widest loads this CPU has.
///
/// # Safety
/// `p` readable for `len` bytes.
#[cfg(target_arch = "x86_64")]
unsafe fn read_sum(p: *const u8, len: usize) -> u64 {
    // SAFETY: the feature each variant needs is detected first; `p`, `len` forwarded.
    unsafe {
        if std::arch::is_x86_feature_detected!("avx512f") {
            read_sum512(p, len)
        } else if std::arch::is_x86_feature_detected!("avx2") {
            read_sum256(p, len)
        } else {
            let s = core::slice::from_raw_parts(p, len);
            s.iter().fold(0u64, |a, &b| a.wrapping_add(b as u64))
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn read_sum(p: *const u8, len: usize) -> u64 {
    // SAFETY: the caller guarantees len readable bytes.
    let s = unsafe { core::slice::from_raw_parts(p, len) };
    s.iter().fold(0u64, |a, &b| a.wrapping_add(b as u64))
}

/// Reads the quant and scale bytes of groups `g0..g1` of `w`.
fn probe_groups(w: &Int8Weight, g0: usize, g1: usize) -> u64 {
    let (q, s) = (w.quant_bytes(), w.scale_words());
    let (qg, sg) = (q.len() / w.groups(), s.len() / w.groups());
    let (qr, sr) = (&q[g0 * qg..g1 * qg], &s[g0 * sg..g1 * sg]);
    // SAFETY: both ranges are inside the weight's buffers.
    unsafe { read_sum(qr.as_ptr(), qr.len()) ^ read_sum(sr.as_ptr().cast(), sr.len() * 2) }
}

struct Row {
    gbs: Vec<f64>,
    secs: Vec<f64>,
    probe_gbs: f64,
    probe_secs: f64,
    bytes: usize,
}

fn measure(kern: Int8Kernel, w: &Int8Weight, threads: usize, ms: &[usize], sized: bool) -> Row {
    let (k, n) = (w.k(), w.n());
    let bytes = w.packed_bytes();
    let reps = (40e6 / bytes as f64).clamp(15.0, 400.0) as usize;
    let mut gbs = Vec::new();
    let mut secs = Vec::new();
    let mut plan_tiles = 1;
    for &m in ms {
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let mut acts = QActs::with_capacity(m, k);
        kern.quantize_acts_for(&x, m, k, w.act_blocks(), &mut acts)
            .expect("acts");
        let mut y = vec![0f32; m * n];
        let mut plan = Int8Plan::new(kern, w, &acts, &mut y, n).expect("plan");
        if sized {
            plan = plan.with_workers(threads);
        }
        plan_tiles = plan.tiles();
        let mut t = time_parallel(threads, plan.tiles(), reps, &|st, wk| {
            plan.run_worker(st, wk).expect("run")
        });
        let s = median(&mut t);
        secs.push(s);
        gbs.push(bytes as f64 / s / 1e9);
    }
    // The probe: the same groups, in as many tiles as the plan had (M ≤ 8: one row chunk).
    let ng = w.groups();
    let per = ng.div_ceil(plan_tiles);
    let tiles = ng.div_ceil(per);
    let sink = std::sync::atomic::AtomicU64::new(0);
    let mut t = time_parallel(threads, tiles, reps, &|st, wk| {
        let mut acc = 0u64;
        st.run_worker(wk, |t| {
            let g0 = t * per;
            acc ^= probe_groups(w, g0, (g0 + per).min(ng));
        })
        .expect("probe");
        sink.fetch_xor(acc, std::sync::atomic::Ordering::Relaxed);
    });
    std::hint::black_box(sink.load(std::sync::atomic::Ordering::Relaxed));
    let probe_secs = median(&mut t);
    Row {
        gbs,
        secs,
        probe_gbs: bytes as f64 / probe_secs / 1e9,
        probe_secs,
        bytes,
    }
}

/// AMX-INT8 for every row chunk (the dispatched kernel sends chunks of ≤ 8 rows to VNNI).
#[cfg(target_arch = "x86_64")]
fn amx_all_kernel() -> Int8Kernel {
    let t =
        hetero_sme::arch::x86_64::AmxInt8::try_new().unwrap_or_else(|| panic!("no AMX-INT8 here"));
    Int8Kernel::Amx(t.with_vnni_rows(0))
}

#[cfg(not(target_arch = "x86_64"))]
fn amx_all_kernel() -> Int8Kernel {
    unreachable!("amx-all is x86-64 only")
}

/// The AMX kernel's small-M routing, for the header line.
fn routing(kern: Int8Kernel) -> String {
    match kern {
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Amx(t) => format!(" (vnni for <= {} rows)", t.vnni_rows()),
        _ => String::new(),
    }
}

fn main() {
    let mut threads: Vec<usize> = Vec::new();
    let mut format = Int8Format::Q4_1;
    let mut kern = Int8Kernel::best();
    let mut sized = true;
    let mut llama = false;
    let mut ms: Vec<usize> = vec![1, 2, 4];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--format" => {
                let name = args.next().unwrap_or_default();
                format = (0..64)
                    .filter_map(Int8Format::from_code)
                    .find(|t| t.name().eq_ignore_ascii_case(&name))
                    .unwrap_or_else(|| panic!("no format {name}"));
            }
            "--shapes" => llama = args.next().as_deref() == Some("llama"),
            "--m" => {
                ms = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|v| v.parse().expect("--m 1,2,4"))
                    .collect()
            }
            "--default-tiles" => sized = false,
            "--kernel" => {
                let name = args.next().unwrap_or_default();
                #[cfg(target_arch = "x86_64")]
                let amx_all = name == "amx-all";
                #[cfg(not(target_arch = "x86_64"))]
                let amx_all = false;
                kern = if amx_all {
                    amx_all_kernel()
                } else {
                    *Int8Kernel::available()
                        .iter()
                        .find(|k| k.name() == name)
                        .unwrap_or_else(|| panic!("kernel {name} not available here"))
                };
            }
            _ => threads.extend(a.parse::<usize>().ok().filter(|&t| t > 0)),
        }
    }
    if threads.is_empty() {
        threads = vec![1, 2];
    }
    // SmolLM2-135M: hidden 576, 9 query / 3 KV heads of 64, FFN 1536, vocabulary 49152.
    let smol: &[(&str, usize, usize)] = &[
        ("q,o", 576, 576),
        ("k,v", 576, 192),
        ("gate,up", 576, 1536),
        ("down", 1536, 576),
        ("head", 576, 49152),
        ("4096²", 4096, 4096),
    ];
    // Llama-3.2-1B (hidden 2048, 8 KV heads of 64, FFN 8192) and Llama-3-8B (4096, 8 KV heads
    // of 128, FFN 14336).
    let big: &[(&str, usize, usize)] = &[
        ("1b q,o", 2048, 2048),
        ("1b k,v", 2048, 512),
        ("1b gate", 2048, 8192),
        ("1b down", 8192, 2048),
        ("8b q,o", 4096, 4096),
        ("8b k,v", 4096, 1024),
        ("8b gate", 4096, 14336),
        ("8b down", 14336, 4096),
    ];
    let shapes = if llama { big } else { smol };
    // Per layer: q, k, v, o, gate, up, down.
    let layers: Vec<(&str, [usize; 7])> = if llama {
        vec![
            ("1b layer", [0, 1, 1, 0, 2, 2, 3]),
            ("8b layer", [4, 5, 5, 4, 6, 6, 7]),
        ]
    } else {
        vec![("layer", [0, 1, 1, 0, 2, 2, 3])]
    };
    let weights: Vec<Int8Weight> = shapes
        .iter()
        .map(|&(_, k, n)| weight(format, n, k))
        .collect();
    println!(
        "int8 decode, kernel {}{}, {format:?}, tiles {}, GB/s of packed weight (quants + scales), medians",
        kern.name(),
        routing(kern),
        if sized { "with_workers(threads)" } else { "default" }
    );
    let mcols: String = ms
        .iter()
        .map(|m| format!(" {:>7}", format!("M={m}")))
        .collect();
    let rcols: String = ms
        .iter()
        .map(|m| format!(" {:>5}", format!("r{m}")))
        .collect();
    println!(
        "{:>3} {:<8} {:>6} {:>9} |{mcols} | {:>7} |{rcols}",
        "thr", "shape", "k", "n", "probe"
    );
    let line = |t: usize, name: &str, k: String, n: usize, g: &[f64], p: f64| {
        let gs: String = g.iter().map(|v| format!(" {v:>7.1}")).collect();
        let rs: String = g.iter().map(|v| format!(" {:>5.2}", v / p)).collect();
        println!("{t:>3} {name:<8} {k:>6} {n:>9} |{gs} | {p:>7.1} |{rs}");
    };
    for &t in &threads {
        let rows: Vec<Row> = weights
            .iter()
            .map(|w| measure(kern, w, t, &ms, sized))
            .collect();
        for ((name, k, n), r) in shapes.iter().zip(&rows) {
            line(t, name, k.to_string(), *n, &r.gbs, r.probe_gbs);
        }
        // One decoder layer: total bytes over total median time (n column: its bytes).
        for (name, layer) in &layers {
            let bytes: usize = layer.iter().map(|&i| rows[i].bytes).sum();
            let ps: f64 = layer.iter().map(|&i| rows[i].probe_secs).sum();
            let g: Vec<f64> = (0..ms.len())
                .map(|j| bytes as f64 / layer.iter().map(|&i| rows[i].secs[j]).sum::<f64>() / 1e9)
                .collect();
            line(t, name, String::new(), bytes, &g, bytes as f64 / ps / 1e9);
        }
    }
}
