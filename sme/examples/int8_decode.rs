//! Decode at memory speed: the int8 GEMM at M = 1, 2, 4 on SmolLM2-135M's matmul shapes (and
//! 4096×4096), against a read-bandwidth probe over the same packed bytes, at each thread count
//! given, through `Int8Plan` + `StealState` work stealing (the probe: the same groups cut into
//! the same number of tiles, each tile summing its groups' quant and scale bytes with 64-byte
//! loads). Prints achieved GB/s of packed weight (quants + scales) and the ratio to the probe;
//! a "layer" line sums one decoder layer's seven matmuls (q, k, v, o, gate, up, down).
//! Activations are quantized once before timing (the probe reads no activations either).
//!
//! `cargo run --release -p hetero-sme --example int8_decode -- [THREADS...] [--format q4_0|q4_1|q8_0] [--kernel NAME] [--default-tiles]`
//! (default threads 1 2; format q4_1, SmolLM2's; kernel: `Int8Kernel::best()`, or a name from
//! `Int8Kernel::available()`, or `amx-all`: AMX-INT8 for every row chunk). Plans are cut
//! for the thread count (`Int8Plan::with_workers`; `--default-tiles`: not). Medians of a number
//! of calls sized to ~40 ms per case; threads beyond the cores oversubscribe.

use hetero_sme::*;

#[path = "support/spin_pool.rs"]
mod spin_pool;
use spin_pool::{median, time_parallel};

fn weight(format: Int8Format, n: usize, k: usize) -> Int8Weight {
    let blocks = n * k / 32;
    let qs = |i: usize| core::array::from_fn(|j| (i * 7 + j * 13) as u8);
    match format {
        Int8Format::Q4_0 => Int8Weight::pack_q4_0(
            &(0..blocks)
                .map(|i| BlockQ4_0 {
                    d: 0x2c00,
                    qs: qs(i),
                })
                .collect::<Vec<_>>(),
            n,
            k,
        ),
        Int8Format::Q4_1 => Int8Weight::pack_q4_1(
            &(0..blocks)
                .map(|i| BlockQ4_1 {
                    d: 0x2c00,
                    m: 0xac00,
                    qs: qs(i),
                })
                .collect::<Vec<_>>(),
            n,
            k,
        ),
        Int8Format::Q8_0 => Int8Weight::pack_q8_0(
            &(0..blocks)
                .map(|i| BlockQ8_0 {
                    d: 0x2c00,
                    qs: core::array::from_fn(|j| (i * 7 + j * 13) as i8),
                })
                .collect::<Vec<_>>(),
            n,
            k,
        ),
    }
    .expect("shape")
}

/// Sums `len` bytes at `p` (64-byte loads, four chains; the tail byte by byte).
///
/// # Safety
/// `p` readable for `len` bytes; AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_sum(p: *const u8, len: usize) -> u64 {
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
    #[cfg(target_arch = "x86_64")]
    assert!(
        std::arch::is_x86_feature_detected!("avx512f"),
        "probe needs AVX-512F"
    );
    // SAFETY: both ranges are inside the weight's buffers; AVX-512F checked above.
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
        kern.quantize_acts(&x, m, k, &mut acts).expect("acts");
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
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--format" => {
                format = match args.next().as_deref() {
                    Some("q4_0") => Int8Format::Q4_0,
                    Some("q8_0") => Int8Format::Q8_0,
                    _ => Int8Format::Q4_1,
                }
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
    let ms = [1, 2, 4];
    // SmolLM2-135M: hidden 576, 9 query / 3 KV heads of 64, FFN 1536, vocabulary 49152.
    let shapes: [(&str, usize, usize); 6] = [
        ("q,o", 576, 576),
        ("k,v", 576, 192),
        ("gate,up", 576, 1536),
        ("down", 1536, 576),
        ("head", 576, 49152),
        ("4096²", 4096, 4096),
    ];
    // Per layer: q, k, v, o, gate, up, down = shapes 0, 1, 1, 0, 2, 2, 3.
    let layer = [0usize, 1, 1, 0, 2, 2, 3];
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
    println!(
        "{:>3} {:<8} {:>6} {:>9} | {:>7} {:>7} {:>7} | {:>7} | {:>5} {:>5} {:>5}",
        "thr", "shape", "k", "n", "M=1", "M=2", "M=4", "probe", "r1", "r2", "r4"
    );
    for &t in &threads {
        let rows: Vec<Row> = weights
            .iter()
            .map(|w| measure(kern, w, t, &ms, sized))
            .collect();
        for ((name, k, n), r) in shapes.iter().zip(&rows) {
            println!(
                "{t:>3} {name:<8} {k:>6} {n:>9} | {:>7.1} {:>7.1} {:>7.1} | {:>7.1} | {:>5.2} {:>5.2} {:>5.2}",
                r.gbs[0],
                r.gbs[1],
                r.gbs[2],
                r.probe_gbs,
                r.gbs[0] / r.probe_gbs,
                r.gbs[1] / r.probe_gbs,
                r.gbs[2] / r.probe_gbs
            );
        }
        // One decoder layer: total bytes over total median time.
        let bytes: usize = layer.iter().map(|&i| rows[i].bytes).sum();
        let ps: f64 = layer.iter().map(|&i| rows[i].probe_secs).sum();
        let g: Vec<f64> = (0..ms.len())
            .map(|j| bytes as f64 / layer.iter().map(|&i| rows[i].secs[j]).sum::<f64>() / 1e9)
            .collect();
        let p = bytes as f64 / ps / 1e9;
        println!(
            "{t:>3} {:<8} {:>6} {:>9} | {:>7.1} {:>7.1} {:>7.1} | {:>7.1} | {:>5.2} {:>5.2} {:>5.2}",
            "layer",
            "",
            bytes,
            g[0],
            g[1],
            g[2],
            p,
            g[0] / p,
            g[1] / p,
            g[2] / p
        );
    }
}
