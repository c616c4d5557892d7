//! The decompression GEMM (`DqPlan`) against the int8 GEMM (`Int8Plan`) on prefill shapes, and
//! the AMX-BF16 tile peak.
//!
//! ```sh
//! # per CPU-second of one thread (CLOCK_THREAD_CPUTIME_ID: meaningful on a loaded machine),
//! # best of 5 rounds, every dq kernel and the best int8 kernel, M = 8..512:
//! cargo run --release -p hetero-sme --example dq_gemm -- cpu [TYPE] [SHAPES]
//! # wall clock on a pool of T threads, median of 7 rounds (a quiet machine):
//! cargo run --release -p hetero-sme --example dq_gemm -- threads T [TYPE] [SHAPES] [M]
//! # the best decompression kernel alone (quick A/B of a change), per CPU-second:
//! cargo run --release -p hetero-sme --example dq_gemm -- best [TYPE] [SHAPES] [M,M,..]
//! # the AMX-BF16 tile peak: tdpbf16ps on registers only, T threads:
//! cargo run --release -p hetero-sme --example dq_gemm -- peak T
//! # an F16 llama-1b decode step's matmuls (16 layers + the 128256-row head, 2.47 GB of
//! # packed FP16 weight) at M = 1 on the FP16 tile GEMM, T threads, GB/s (median of 9):
//! cargo run --release -p hetero-sme --example dq_gemm -- f16gemv T
//! ```
//! TYPE: q4_0 (default), q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k. SHAPES: `1b` (llama-1b:
//! 2048×2048, 8192×2048, 2048×8192; default) or `8b` (4096×4096, 1024×4096, 14336×4096,
//! 4096×14336). Times include the activation conversion (dq) or quantization (int8), each
//! run once per matmul as the engine runs them. GOP/s = 2·M·N·K / time.

use std::time::Instant;

use hetero_sme::*;

fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant Linux knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn ty_of(s: &str) -> GgmlType {
    match s {
        "q4_1" => GgmlType::Q4_1,
        "q5_0" => GgmlType::Q5_0,
        "q5_1" => GgmlType::Q5_1,
        "q8_0" => GgmlType::Q8_0,
        "q4_k" => GgmlType::Q4K,
        "q5_k" => GgmlType::Q5K,
        "q6_k" => GgmlType::Q6K,
        _ => GgmlType::Q4_0,
    }
}

fn shapes(s: &str) -> Vec<(usize, usize)> {
    match s {
        "8b" => vec![(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)],
        _ => vec![(2048, 2048), (8192, 2048), (2048, 8192)],
    }
}

/// A weight of `n` rows of `k` values of `ty`: pseudo-random quant bits with sane FP16 scales
/// (random bits time the same as a real model's, and are made in a blink at 8B sizes).
fn weight(ty: GgmlType, n: usize, k: usize) -> Int8Weight {
    let (be, bb) = ty.block().expect("block type");
    let nb = n * k / be;
    let mut bytes = vec![0u8; nb * bb + 1];
    let off = bytes.as_ptr().align_offset(2).min(1);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let f16 = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes();
    for i in 0..nb {
        let blk = &mut bytes[off + i * bb..off + (i + 1) * bb];
        for v in blk.iter_mut() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            *v = (s >> 32) as u8;
        }
        let d = 0.002 + 0.02 * ((i % 17) as f32 / 17.0);
        match ty {
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                blk[..2].copy_from_slice(&f16(d));
                blk[2..4].copy_from_slice(&f16(-0.05));
            }
            GgmlType::Q4K | GgmlType::Q5K => {
                blk[..2].copy_from_slice(&f16(d / 32.0));
                blk[2..4].copy_from_slice(&f16(d / 64.0));
            }
            GgmlType::Q6K => blk[208..210].copy_from_slice(&f16(d / 64.0)),
            _ => blk[..2].copy_from_slice(&f16(d)),
        }
    }
    Int8Weight::pack_gguf(ty, &bytes[off..off + nb * bb], n, k).expect("pack")
}

fn acts(m: usize, k: usize) -> Vec<f32> {
    (0..m * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    match arg(0, "cpu").as_str() {
        "peak" => peak(arg(1, "1").parse().unwrap_or(1)),
        "best" => best_only(
            ty_of(&arg(1, "q4_0")),
            &arg(2, "8b"),
            &arg(3, "128,512")
                .split(',')
                .filter_map(|v| v.parse().ok())
                .collect::<Vec<usize>>(),
        ),
        "threads" => {
            let ms: Vec<usize> = arg(4, "512")
                .split(',')
                .filter_map(|v| v.parse().ok())
                .collect();
            threads(
                arg(1, "2").parse().unwrap_or(2),
                ty_of(&arg(2, "q4_0")),
                &arg(3, "1b"),
                &ms,
            )
        }
        "f16gemv" => f16gemv(arg(1, "2").parse().unwrap_or(2)),
        _ => per_cpu_second(ty_of(&arg(1, "q4_0")), &arg(2, "1b")),
    }
}

fn per_cpu_second(ty: GgmlType, set: &str) {
    let int8 = Int8Kernel::best();
    let dqs = DqKernel::available();
    print!(
        "{ty:?} GOP/s per CPU-second (best of 5), n x k, M | {}",
        int8.name()
    );
    for d in &dqs {
        print!(" | dq {}", d.name());
    }
    println!();
    for (n, k) in shapes(set) {
        let w = weight(ty, n, k);
        for m in [8usize, 16, 32, 64, 128, 256, 512] {
            let x = acts(m, k);
            let ops = 2.0 * (m * n * k) as f64;
            let mut y = vec![0f32; m * n];
            let mut qa = QActs::with_capacity(m, k);
            let best = |f: &mut dyn FnMut()| {
                let mut b = u64::MAX;
                for _ in 0..5 {
                    let t = cpu_ns();
                    f();
                    b = b.min(cpu_ns() - t);
                }
                ops / b as f64
            };
            let r8 = best(&mut || {
                int8.quantize_acts_for(&x, m, k, w.act_blocks(), &mut qa)
                    .unwrap();
                int8.gemm(&w, &qa, &mut y, n).unwrap();
            });
            print!("{n} x {k}, M {m} | {r8:.0}");
            for &d in &dqs {
                if matches!(d, DqKernel::Tile(kk) if kk.kind() == KernelKind::Portable) && m > 8 {
                    print!(" | -");
                    continue;
                }
                let mut da = DqActs::with_workers(m, k, 1);
                let r = best(&mut || {
                    da.convert(d, &x, m, k).unwrap();
                    let mut p = DqPlan::new(d, &w, &x, &da, OutMut::new(&mut y), n).unwrap();
                    p.run_all();
                });
                print!(" | {r:.0}");
            }
            println!();
        }
    }
}

fn threads(t: usize, ty: GgmlType, set: &str, ms: &[usize]) {
    let pool = ThreadPool::new(t).expect("pool");
    let int8 = Int8Kernel::best();
    let dq = DqKernel::best();
    let ws: Vec<(usize, usize, Int8Weight)> = shapes(set)
        .into_iter()
        .map(|(n, k)| (n, k, weight(ty, n, k)))
        .collect();
    for &m in ms {
        println!(
            "{ty:?} M {m}, {t} threads, wall clock, median of 7 (GOP/s): int8 {} | dq {}",
            int8.name(),
            dq.name()
        );
        let (mut tot8, mut totd, mut ops_all) = (0f64, 0f64, 0f64);
        for (n, k, w) in &ws {
            let (n, k) = (*n, *k);
            let x = acts(m, k);
            let ops = 2.0 * (m * n * k) as f64;
            let mut y = vec![0f32; m * n];
            let mut qa = QActs::with_capacity(m, k);
            let mut da = DqActs::with_workers(m, k, t);
            let median = |f: &mut dyn FnMut()| {
                f();
                let mut v: Vec<f64> = (0..7)
                    .map(|_| {
                        let t0 = Instant::now();
                        f();
                        t0.elapsed().as_secs_f64()
                    })
                    .collect();
                v.sort_by(|a, b| a.total_cmp(b));
                v[3]
            };
            let t8 = median(&mut || {
                int8.quantize_acts_for(&x, m, k, w.act_blocks(), &mut qa)
                    .unwrap();
                let plan = Int8Plan::new(int8, w, &qa, &mut y, n)
                    .unwrap()
                    .with_workers(t);
                pool.run_workers(plan.tiles(), &|st, th| {
                    let _ = plan.run_worker(st, th);
                })
                .unwrap();
            });
            let td = median(&mut || {
                da.convert_on(dq, &x, m, k, &pool).unwrap();
                let plan = DqPlan::new(dq, w, &x, &da, OutMut::new(&mut y), n)
                    .unwrap()
                    .with_workers(t);
                pool.run_workers(plan.tiles(), &|st, th| {
                    let _ = plan.run_worker(st, th);
                })
                .unwrap();
            });
            println!(
                "{n} x {k}: int8 {:.0} | dq {:.0} GOP/s ({:.2}x)",
                ops / t8 / 1e9,
                ops / td / 1e9,
                t8 / td
            );
            (tot8, totd, ops_all) = (tot8 + t8, totd + td, ops_all + ops);
        }
        println!(
            "all shapes, M {m}: int8 {:.0} | dq {:.0} GOP/s ({:.2}x)",
            ops_all / tot8 / 1e9,
            ops_all / totd / 1e9,
            tot8 / totd
        );
    }
}

/// An F16 llama-1b decode step's matmuls on the packed FP16 tile GEMM at M = 1.
fn f16gemv(t: usize) {
    let pool = ThreadPool::new(t).expect("pool");
    let kern = Kernel::best(PackedFormat::F16);
    // (n, k) per layer: q, k, v, o, gate, up, down; 16 layers; then the head.
    let layer = [
        (2048, 2048),
        (512, 2048),
        (512, 2048),
        (2048, 2048),
        (8192, 2048),
        (8192, 2048),
        (2048, 8192),
    ];
    let mut shapes: Vec<(usize, usize)> = (0..16).flat_map(|_| layer).collect();
    shapes.push((128256, 2048));
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let ws: Vec<(usize, usize, Vec<u16>)> = shapes
        .iter()
        .map(|&(n, k)| {
            let mut v = vec![0u16; packed_len(k, n)];
            for e in v.iter_mut() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                // |w| < 1, normal FP16, either sign.
                *e = ((s >> 40) as u16 & 0x8000) | (0x2000 + ((s >> 20) as u16 & 0x17FF));
            }
            (n, k, v)
        })
        .collect();
    let bytes: usize = ws.iter().map(|w| 2 * w.2.len()).sum();
    let x = acts(1, 8192);
    let mut y = vec![0f32; 128256];
    let mut step = || {
        for (n, k, w) in &ws {
            let g = Gemm {
                a: Lhs::F32(&x[..*k]),
                m: 1,
                lda: *k,
                w: PackedRef::new(w, *k, *n, PackedFormat::F16).unwrap(),
                bias: None,
                accumulate: false,
            };
            let plan = GemmPlan::new(kern, &g, &mut y[..*n], *n).unwrap();
            pool.run_workers(plan.tiles(), &|st, th| {
                let _ = plan.run_worker(st, th);
            })
            .unwrap();
        }
    };
    step();
    let mut v: Vec<f64> = (0..9)
        .map(|_| {
            let t0 = Instant::now();
            step();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    println!(
        "f16 llama-1b decode matmuls, {} kernel, {t} threads: {:.2} GB a token, median {:.2} ms = {:.1} GB/s ({:.1} tok/s of matmuls; best {:.1} GB/s)",
        kern.name(),
        bytes as f64 / 1e9,
        v[4] * 1e3,
        bytes as f64 / v[4] / 1e9,
        1.0 / v[4],
        bytes as f64 / v[0] / 1e9
    );
}

#[cfg(target_arch = "x86_64")]
fn peak(t: usize) {
    use hetero_sme::arch::x86_64::Amx;
    if Amx::try_new().is_none() {
        println!("peak: no AMX-BF16 (or the tile-data permission was refused)");
        return;
    }
    // Each thread: 4 accumulators (tmm0-3) × tmm4-7 operands, 8 tdpbf16ps per iteration,
    // registers only (no loads): the tile multiply unit's rate.
    let iters = 2_000_000u64;
    let run = || {
        let mut cfg = [0u8; 64];
        cfg[0] = 1;
        for i in 0..8 {
            cfg[16 + 2 * i] = 64;
            cfg[48 + i] = 16;
        }
        let zero = [0u8; 1024];
        let t0 = Instant::now();
        // SAFETY: AMX-BF16 and the tile-data permission are proven by the token above (per
        // process); a valid palette-1 config; operand tiles loaded from 1 KiB of zeros.
        unsafe {
            core::arch::asm!(
                "ldtilecfg [{cfg}]",
                "tileloadd tmm4, [{z} + {s}*1]",
                "tileloadd tmm5, [{z} + {s}*1]",
                "tileloadd tmm6, [{z} + {s}*1]",
                "tileloadd tmm7, [{z} + {s}*1]",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "2:",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "tdpbf16ps tmm0, tmm5, tmm7",
                "tdpbf16ps tmm1, tmm5, tmm6",
                "tdpbf16ps tmm2, tmm4, tmm7",
                "tdpbf16ps tmm3, tmm4, tmm6",
                "dec {n}",
                "jnz 2b",
                "tilerelease",
                cfg = in(reg) cfg.as_ptr(),
                z = in(reg) zero.as_ptr(),
                s = in(reg) 64usize,
                n = inout(reg) iters => _,
                options(nostack),
            );
        }
        t0.elapsed().as_secs_f64()
    };
    let secs: Vec<f64> = std::thread::scope(|s| {
        let h: Vec<_> = (0..t).map(|_| s.spawn(run)).collect();
        h.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let flops_per = 8.0 * iters as f64 * 2.0 * 16.0 * 16.0 * 32.0;
    let total: f64 = secs.iter().map(|s| flops_per / s).sum();
    println!(
        "AMX-BF16 peak, {t} threads: {:.0} GFLOP/s in all, {:.0} per thread (slowest {:.3} s)",
        total / 1e9,
        total / 1e9 / t as f64,
        secs.iter().cloned().fold(0.0, f64::max)
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn peak(_t: usize) {
    println!("peak: x86-64 only");
}

/// The best decompression kernel alone, per CPU-second, at the M values given (quick A/B).
fn best_only(ty: GgmlType, set: &str, ms: &[usize]) {
    let d = DqKernel::best();
    println!("{ty:?} dq {} GOP/s per CPU-second (best of 5)", d.name());
    for (n, k) in shapes(set) {
        let w = weight(ty, n, k);
        for &m in ms {
            let x = acts(m, k);
            let mut y = vec![0f32; m * n];
            let mut da = DqActs::with_workers(m, k, 1);
            let mut b = u64::MAX;
            for _ in 0..5 {
                let t = cpu_ns();
                da.convert(d, &x, m, k).unwrap();
                let mut p = DqPlan::new(d, &w, &x, &da, OutMut::new(&mut y), n).unwrap();
                p.run_all();
                b = b.min(cpu_ns() - t);
            }
            println!(
                "{n} x {k}, M {m} | {:.0}",
                2.0 * (m * n * k) as f64 / b as f64
            );
        }
    }
}
