//! AMX-INT8 against AVX-512 VNNI, one thread (pin it: `taskset -c 0`): the int8 GEMM on
//! SmolLM2-135M's matmul shapes and 4096×4096 at M = 1 … 256, each kernel on the same packed
//! weight and the same quantized activations (quantization not timed), outputs checked bit for
//! bit against each other. Kernels: `avx512-vnni`, `amx-int8` as dispatched (row chunks of ≤ 8
//! rows on VNNI) and `amx-int8` with AMX on every row chunk at tile-pipeline lookahead 1, 2, 3.
//! Prints medians (GOP/s, 2·M·N·K per second) and each AMX variant / VNNI.
//!
//! `cargo run --release -p hetero-sme --example int8_amx -- [--format q4_0|q4_1|q8_0] [--ms 1,2,128] [--budget-ms 40]`
//! (default Q4_1, SmolLM2's; M 1 2 4 8 16 32 64 128 256; ~40 ms of calls per case). Without
//! AMX-INT8 it times VNNI alone.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::time::Instant;

    use hetero_sme::*;

    fn weight(format: Int8Format, n: usize, k: usize) -> Int8Weight {
        let blocks = n * k / 32;
        let qs = |i: usize| core::array::from_fn(|j| (i * 7 + j * 13) as u8);
        let d = |i: usize| half::f16::from_f32(0.01 + (i % 17) as f32 * 1e-3).to_bits();
        match format {
            Int8Format::Q4_0 => Int8Weight::pack_q4_0(
                &(0..blocks)
                    .map(|i| BlockQ4_0 { d: d(i), qs: qs(i) })
                    .collect::<Vec<_>>(),
                n,
                k,
            ),
            Int8Format::Q4_1 => Int8Weight::pack_q4_1(
                &(0..blocks)
                    .map(|i| BlockQ4_1 {
                        d: d(i),
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
                        d: d(i),
                        qs: core::array::from_fn(|j| (i * 7 + j * 13) as i8),
                    })
                    .collect::<Vec<_>>(),
                n,
                k,
            ),
        }
        .expect("shape")
    }

    /// Median seconds of single-threaded calls, as many as fit `budget` seconds (at least 5).
    fn time(budget: f64, mut f: impl FnMut()) -> f64 {
        f();
        let start = Instant::now();
        let mut v = Vec::new();
        while v.len() < 5 || (start.elapsed().as_secs_f64() < budget && v.len() < 2000) {
            let t = Instant::now();
            f();
            v.push(t.elapsed().as_secs_f64());
        }
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    pub fn main() {
        let mut format = Int8Format::Q4_1;
        let mut ms: Vec<usize> = vec![1, 2, 4, 8, 16, 32, 64, 128, 256];
        let mut budget = 0.04;
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
                "--ms" => {
                    ms = args
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .filter_map(|s| s.parse().ok())
                        .collect()
                }
                "--budget-ms" => {
                    budget = args
                        .next()
                        .and_then(|s| s.parse::<f64>().ok())
                        .unwrap_or(40.0)
                        / 1e3
                }
                _ => {}
            }
        }
        let vnni = Int8Kernel::available()
            .into_iter()
            .find(|k| k.name() == "avx512-vnni")
            .expect("this example needs AVX-512 VNNI");
        let mut kernels = vec![("vnni", vnni)];
        match hetero_sme::arch::x86_64::AmxInt8::try_new() {
            Some(t) => {
                kernels.push(("amx", Int8Kernel::Amx(t)));
                for (la, name) in [(1, "all-la1"), (2, "all-la2"), (3, "all-la3")] {
                    let all = t.with_vnni_rows(0).with_lookahead(la);
                    kernels.push((name, Int8Kernel::Amx(all)));
                }
            }
            None => println!("(no AMX-INT8 here, or the OS refused the tile state: VNNI only)"),
        }
        let shapes = [
            (576, 576),
            (576, 192),
            (576, 1536),
            (1536, 576),
            (576, 49152),
            (4096, 4096),
        ];
        println!(
            "int8 GEMM, one thread, {format:?}, GOP/s (medians), then each AMX variant / vnni; \
             amx = as dispatched (VNNI for <= 8-row chunks, lookahead 3), all-laN = AMX for every \
             row chunk, N blocks of tile work ahead of the epilogue"
        );
        print!("{:>5} {:>6} {:>6}", "M", "K", "N");
        for (name, _) in &kernels {
            print!(" {name:>8}");
        }
        for (name, _) in kernels.iter().skip(1) {
            print!(" {:>8}", format!("{name}/v"));
        }
        println!();
        for &(k, n) in &shapes {
            let w = weight(format, n, k);
            for &m in &ms {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                    .collect();
                let mut acts = QActs::with_capacity(m, k);
                vnni.quantize_acts(&x, m, k, &mut acts).expect("acts");
                let mut want = vec![0f32; m * n];
                vnni.gemm(&w, &acts, &mut want, n).expect("gemm");
                let mut y = vec![0f32; m * n];
                let ops = 2.0 * (m * n * k) as f64;
                let mut rates = Vec::new();
                for (name, kern) in &kernels {
                    y.fill(f32::NAN);
                    let s = time(budget, || kern.gemm(&w, &acts, &mut y, n).expect("gemm"));
                    assert!(
                        y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{name} differs from vnni at m{m} k{k} n{n}"
                    );
                    rates.push(ops / s / 1e9);
                }
                print!("{m:>5} {k:>6} {n:>6}");
                for r in &rates {
                    print!(" {r:>8.1}");
                }
                for r in rates.iter().skip(1) {
                    print!(" {:>8.2}", r / rates[0]);
                }
                println!();
            }
        }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    x86::main();
    #[cfg(not(target_arch = "x86_64"))]
    {
        eprintln!("int8_amx: x86-64 only");
        std::process::exit(2);
    }
}
