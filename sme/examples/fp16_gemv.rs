//! The packed Q4 GEMV at M = 1 with FP16 arithmetic (`QPackedFp16Plan`: native AVX512-FP16, or
//! the emulation where the CPU lacks it) against the FP32 kernel (`QPackedPlan`,
//! `Kernel::best_gemv()`) and a read-bandwidth probe over the same packed bytes, at each thread
//! count given (work stealing over the same 64-row tiles). Prints GB/s of packed weight and the
//! ratios to the probe (the goal: FP16 ≥ 70 % of it).
//!
//! `cargo run --release -p hetero-sme --example fp16_gemv -- [THREADS...] [--big]`
//! (default threads 1 2). Weights: Q4_0 and Q4_1 4096×14336 (33 / 37 MB) and SmolLM2's LM head
//! 576×49152; `--big` adds a 604 MB Q4_0 weight (K = 16384, N = 65536), beyond a 300 MB L3. The
//! packed bytes of 64 rows are replicated (the speed does not depend on the values).

#[cfg(target_arch = "x86_64")]
#[path = "support/spin_pool.rs"]
mod spin_pool;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use hetero_sme::*;

    use super::spin_pool::{median, time_parallel};

    /// A packed weight of `n` rows (a multiple of 64) × `k`: 64 rows packed, their bytes repeated.
    fn packed(ty: QType, k: usize, n: usize) -> Vec<u8> {
        let rows = 64;
        let blocks = rows * k / 32;
        let mut small = vec![0u8; qpacked_len(ty, k, rows).expect("len")];
        let d = |i: usize| half::f16::from_f32(0.01 + (i % 17) as f32 * 1e-3).to_bits();
        let qs = |i: usize| core::array::from_fn(|j| (i * 7 + j * 13) as u8);
        match ty {
            QType::Q4_0 => {
                let b: Vec<BlockQ4_0> = (0..blocks)
                    .map(|i| BlockQ4_0 { d: d(i), qs: qs(i) })
                    .collect();
                pack_q4_0(&b, k, rows, 0..rows, &mut small)
            }
            _ => {
                let b: Vec<BlockQ4_1> = (0..blocks)
                    .map(|i| BlockQ4_1 {
                        d: d(i),
                        m: 0xac00,
                        qs: qs(i),
                    })
                    .collect();
                pack_q4_1(&b, k, rows, 0..rows, &mut small)
            }
        }
        .expect("pack");
        let len = qpacked_len(ty, k, n).expect("len");
        assert_eq!(len % small.len(), 0);
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            out.extend_from_slice(&small);
        }
        out
    }

    /// Sums `len` bytes at `p` with 64-byte loads (four chains).
    ///
    /// # Safety
    /// `p` readable for `len` bytes, `len` a multiple of 64; AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn read_sum(p: *const u8, len: usize) -> u64 {
        use core::arch::x86_64::*;
        let mut acc = [_mm512_setzero_si512(); 4];
        let mut i = 0;
        // SAFETY: every load reads 64 bytes below p + len.
        unsafe {
            while i + 256 <= len {
                for (c, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_add_epi64(*a, _mm512_loadu_si512(p.add(i + 64 * c).cast()));
                }
                i += 256;
            }
            while i < len {
                acc[0] = _mm512_add_epi64(acc[0], _mm512_loadu_si512(p.add(i).cast()));
                i += 64;
            }
            let v = _mm512_add_epi64(
                _mm512_add_epi64(acc[0], acc[1]),
                _mm512_add_epi64(acc[2], acc[3]),
            );
            _mm512_reduce_add_epi64(v) as u64
        }
    }

    pub fn main() {
        let mut threads: Vec<usize> = Vec::new();
        let mut big = false;
        for a in std::env::args().skip(1) {
            if a == "--big" {
                big = true;
            } else if let Ok(t) = a.parse::<usize>() {
                threads.extend((t > 0).then_some(t));
            }
        }
        if threads.is_empty() {
            threads = vec![1, 2];
        }
        assert!(
            std::arch::is_x86_feature_detected!("avx512f"),
            "needs AVX-512F"
        );
        let fp16 = arch::x86_64::Avx512Fp16::try_new()
            .or_else(arch::x86_64::Avx512Fp16::emulated)
            .expect("needs AVX-512F/BW and F16C");
        let fp32 = Kernel::best_gemv();
        let mut cases = vec![
            (QType::Q4_0, 4096, 14336),
            (QType::Q4_1, 4096, 14336),
            (QType::Q4_0, 576, 49152),
        ];
        if big {
            cases.push((QType::Q4_0, 16384, 65536));
        }
        println!(
            "packed Q4 GEMV, M = 1, GB/s of packed weight (medians): fp32 = {}, fp16 = {}",
            fp32.name(),
            fp16.name()
        );
        println!(
            "{:>3} {:<5} {:>6} {:>6} {:>8} | {:>7} {:>7} {:>7} | {:>6} {:>6}",
            "thr", "type", "k", "n", "MB", "fp32", "fp16", "probe", "fp32/p", "fp16/p"
        );
        for (ty, k, n) in cases {
            let buf = packed(ty, k, n);
            let w = QPackedRef::new(&buf, ty, k, n).expect("packed");
            let x: Vec<f32> = (0..k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let mut y = vec![0f32; n];
            let bytes = buf.len();
            let reps = (400e6 / bytes as f64).clamp(9.0, 200.0) as usize;
            for &t in &threads {
                let p32 = QPackedPlan::new(fp32, &x, 1, k, w, &mut y, n).expect("plan");
                let tiles = p32.tiles();
                let s32 = median(&mut time_parallel(t, tiles, reps, &|st, wk| {
                    p32.run_worker(st, wk).expect("run")
                }));
                let p16 = QPackedFp16Plan::new(fp16, &x, 1, k, w, &mut y, n).expect("plan");
                let s16 = median(&mut time_parallel(t, tiles, reps, &|st, wk| {
                    p16.run_worker(st, wk).expect("run")
                }));
                // The probe: each tile reads its 4 groups' bytes (the same ranges the kernels read).
                let per = bytes / n.div_ceil(64);
                let sink = std::sync::atomic::AtomicU64::new(0);
                let sp = median(&mut time_parallel(t, tiles, reps, &|st, wk| {
                    let mut acc = 0u64;
                    st.run_worker(wk, |i| {
                        let r = &buf[i * per..((i + 1) * per).min(bytes)];
                        // SAFETY: r is inside buf; 64-row tiles are whole 64-byte multiples;
                        // AVX-512F asserted above.
                        acc ^= unsafe { read_sum(r.as_ptr(), r.len() / 64 * 64) };
                    })
                    .expect("probe");
                    sink.fetch_xor(acc, std::sync::atomic::Ordering::Relaxed);
                }));
                std::hint::black_box(sink.load(std::sync::atomic::Ordering::Relaxed));
                let gb = |s: f64| bytes as f64 / s / 1e9;
                println!(
                    "{t:>3} {:<5} {k:>6} {n:>6} {:>8.1} | {:>7.1} {:>7.1} {:>7.1} | {:>6.2} {:>6.2}",
                    format!("{ty:?}"),
                    bytes as f64 / 1e6,
                    gb(s32),
                    gb(s16),
                    gb(sp),
                    sp / s32,
                    sp / s16
                );
            }
        }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    x86::main();
    #[cfg(not(target_arch = "x86_64"))]
    {
        eprintln!("fp16_gemv: x86-64 only");
        std::process::exit(2);
    }
}
