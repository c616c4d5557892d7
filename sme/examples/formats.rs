//! Throughput per weight format of the int8 GEMM (M = 1, 16, 128, activations quantized inside
//! the timed call) and of the packed GEMV (M = 1, 16), single-threaded, on SmolLM2-135M's
//! matmul shapes, side by side with Q4_1 (today's model format).
//!
//! Time is the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so time slices lost to
//! other processes on a shared machine do not count (their cache and memory traffic still
//! does); the formats are timed round-robin (one measurement of each per round) so that what
//! load remains falls on all of them alike; the figure is the median over rounds.
//! K-quants need K a multiple of 256, so on SmolLM2 only `ffn_down` (K = 1536) holds them.
//! Weights are random Gaussian rows quantized with `quantize_row`.
//!
//! `cargo run --release -p hetero-sme --example formats [ROUNDS]`   (default 41)

use std::hint::black_box;

use hetero_sme::*;

const FORMATS: [GgmlType; 8] = [
    GgmlType::Q4_1,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// (name, K, N): attn_q/attn_output, ffn_gate/ffn_up, ffn_down.
const SHAPES: [(&str, usize, usize); 3] = [
    ("attn_q  576x576", 576, 576),
    ("ffn_up  576x1536", 576, 1536),
    ("ffn_down 1536x576", 1536, 576),
];

fn gauss(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut u = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 / (1u64 << 53) as f64).max(1e-12)
    };
    (0..n)
        .map(|_| ((-2.0 * u().ln()).sqrt() * (std::f64::consts::TAU * u()).cos()) as f32 * 0.05)
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// GGUF bytes of `n` rows of `k` random values in `ty`, 64-byte aligned.
fn weight(ty: GgmlType, k: usize, n: usize) -> (Vec<u8>, usize) {
    let rb = ty.row_bytes(k).expect("row size");
    let mut store = vec![0u8; n * rb + 64];
    let off = store.as_ptr().align_offset(64);
    let x = gauss(k * n, 7);
    for (r, dst) in store[off..off + n * rb].chunks_exact_mut(rb).enumerate() {
        quantize_row(ty, &x[r * k..(r + 1) * k], dst).expect("quantize");
    }
    (store, off)
}

#[cfg(unix)]
fn cpu_s() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant Linux/POSIX knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

#[cfg(not(unix))]
fn cpu_s() -> f64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Repeats `f` until at least ~2 ms of this thread's CPU time have passed; returns CPU seconds
/// per call.
fn time(mut f: impl FnMut()) -> f64 {
    let mut reps = 1;
    loop {
        let t = cpu_s();
        for _ in 0..reps {
            f();
        }
        let s = cpu_s() - t;
        if s > 2e-3 {
            return s / reps as f64;
        }
        reps *= 2;
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(41);
    let kern = Int8Kernel::best();
    let gk = Kernel::best_gemv();
    println!(
        "int8 kernel {}, GEMV kernel {}, one thread, {rounds} rounds, medians (GOP/s = 2·M·N·K / s)",
        kern.name(),
        gk.name()
    );
    for (name, k, n) in SHAPES {
        let fmts: Vec<GgmlType> = FORMATS
            .into_iter()
            .filter(|t| !t.is_k_quant() || k % 256 == 0)
            .collect();
        let mut int8w = Vec::new();
        let mut packed = Vec::new();
        for &ty in &fmts {
            let (store, off) = weight(ty, k, n);
            let bytes = &store[off..off + n * ty.row_bytes(k).unwrap()];
            int8w.push(Int8Weight::pack_gguf(ty, bytes, n, k).expect("int8 pack"));
            let len = qpacked_len(ty, k, n).expect("packed len");
            let mut p = vec![0u8; len + 64];
            let po = p.as_ptr().align_offset(64);
            qpack_gguf(ty, bytes, k, n, 0..n, &mut p[po..po + len]).expect("pack");
            packed.push((p, po, len));
        }
        for m in [1usize, 16, 128] {
            let x = gauss(m * k, 11);
            let mut y = vec![0f32; m * n];
            let mut acts = QActs::with_capacity(m, k);
            let mut t_int8 = vec![Vec::new(); fmts.len()];
            let mut t_gemv = vec![Vec::new(); fmts.len()];
            for _ in 0..rounds {
                for (i, w) in int8w.iter().enumerate() {
                    t_int8[i].push(time(|| {
                        kern.quantize_acts_for(black_box(&x), m, k, w.act_blocks(), &mut acts)
                            .unwrap();
                        kern.gemm(w, &acts, &mut y, n).unwrap();
                    }));
                    if m <= GEMV_MAX_ROWS {
                        let (p, po, len) = &packed[i];
                        let pw = QPackedRef::new(&p[*po..*po + len], fmts[i], k, n).unwrap();
                        t_gemv[i].push(time(|| {
                            gk.qgemv_packed(black_box(&x), m, k, pw, &mut y, n).unwrap()
                        }));
                    }
                }
            }
            let ops = (2 * m * n * k) as f64 / 1e9;
            let med: Vec<f64> = t_int8.iter_mut().map(|v| median(v)).collect();
            let base = med[0];
            print!("{name} M={m:<3} int8 GOP/s:");
            for (ty, t) in fmts.iter().zip(&med) {
                print!("  {ty} {:.1} {:.2}x", ops / t, base / t);
            }
            println!();
            if m <= GEMV_MAX_ROWS {
                let med: Vec<f64> = t_gemv.iter_mut().map(|v| median(v)).collect();
                let base = med[0];
                print!("{name} M={m:<3} GEMV GOP/s (weight GB/s):");
                for ((ty, t), (_, _, len)) in fmts.iter().zip(&med).zip(&packed) {
                    print!(
                        "  {ty} {:.1} ({:.1}) {:.2}x",
                        ops / t,
                        *len as f64 / t / 1e9,
                        base / t
                    );
                }
                println!();
            }
        }
    }
}
