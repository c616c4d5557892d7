//! AMX-BF16 GEMM against the `gemm` crate's f32 path, single thread on both sides, side by side
//! in one process, plus a correctness check of the AMX result against gemm's. For CPUs with AMX
//! (Intel Sapphire Rapids and later); elsewhere it says so and exits 2.
//!
//! `cargo run --release -p hetero-sme --example amx_vs_gemm [REPS]`
//! Prints, per shape, one line per AMX tile blocking (`AmxBlocking::{Rows16, Rows32, Rows64}`,
//! timed in turn with the gemm call in the same loop): median seconds of each, GFLOP/s, the
//! ratio, and the largest relative difference |amx - f32| / (|a|·|w| row-sum bound).

#[cfg(target_arch = "x86_64")]
#[path = "../benches/support/anchor.rs"]
mod anchor;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::time::Instant;

    use hetero_sme::arch::x86_64::AmxBlocking;
    use hetero_sme::*;

    use super::anchor::{gemm_anchor, rnd};

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    pub fn main() {
        let reps: usize = std::env::args()
            .nth(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(7);
        let amx = match Kernel::new(KernelKind::Amx) {
            Ok(k) => k,
            Err(e) => {
                println!("amx_vs_gemm: no AMX on this CPU ({e})");
                std::process::exit(2);
            }
        };
        let Kernel::Amx(tok) = amx else {
            unreachable!("Kernel::new(Amx) returns an AMX kernel")
        };
        println!(
            "shape            blocking  amx_s      gemm_f32_s  amx_GF/s  f32_GF/s  ratio  max_rel_err"
        );
        for &(m, k, n) in &[
            (256, 576, 1536),
            (256, 1536, 576),
            (256, 4096, 4096),
            (256, 4096, 14336),
            (256, 14336, 4096),
            (1024, 576, 1536),
            (1024, 1536, 576),
            (1024, 4096, 4096),
        ] {
            let w32 = rnd(k * n, 1);
            let a32 = rnd(m * k, 2);
            let mut packed = vec![0u16; packed_len(k, n)];
            let src = WeightSource {
                data: &w32,
                k,
                n,
                ld: n,
                layout: Layout::RowMajor,
            };
            pack_f32(&src, 0..n, PackedFormat::Bf16, &mut packed).expect("pack");
            let w = PackedRef::new(&packed, k, n, PackedFormat::Bf16).expect("packed ref");
            let g = Gemm {
                a: Lhs::F32(&a32),
                m,
                lda: k,
                w,
                bias: None,
                accumulate: false,
            };
            for blocking in [
                AmxBlocking::Rows16,
                AmxBlocking::Rows32,
                AmxBlocking::Rows64,
            ] {
                let amx = Kernel::Amx(tok.with_blocking(blocking));
                let mut c_amx = vec![f32::NAN; m * n];
                let mut c_ref = vec![f32::NAN; m * n];
                let mut t_amx = Vec::new();
                let mut t_f32 = Vec::new();
                for _ in 0..reps {
                    let t = Instant::now();
                    amx.gemm(&g, &mut c_amx, n).expect("amx gemm");
                    t_amx.push(t.elapsed().as_secs_f64());
                    let t = Instant::now();
                    gemm_anchor(m, n, k, &a32, &w32, &mut c_ref, 0.0, 1.0);
                    t_f32.push(t.elapsed().as_secs_f64());
                }
                // BF16 inputs (8 significant bits): the error bound is relative to Σ|a||w| of
                // the row, here bounded by k·max|a|·max|w| = k/4.
                let bound = k as f32 * 0.25;
                let max_rel = c_amx
                    .iter()
                    .zip(&c_ref)
                    .map(|(x, y)| (x - y).abs() / bound)
                    .fold(0f32, f32::max);
                let (ta, tf) = (median(t_amx), median(t_f32));
                let flop = 2.0 * (m * n * k) as f64;
                println!(
                    "{m:>4}x{k:>5}x{n:>5}  {:<8}  {ta:>9.5}  {tf:>10.5}  {:>8.1}  {:>8.1}  {:>5.2}  {max_rel:.2e}",
                    format!("{blocking:?}"),
                    flop / ta / 1e9,
                    flop / tf / 1e9,
                    tf / ta
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
        println!("amx_vs_gemm: AMX is an x86-64 extension");
        std::process::exit(2);
    }
}
