//! Times the fast matmuls (`hetero_opencl_kernels::fast`, kernels/mm.cl) at Llama-3.2-1B and
//! Llama-3-8B shapes on random weights, against the device's limits measured in the same run:
//! copy bandwidth (clEnqueueCopyBuffer, bytes read + written) and the FP32 FMA rate of an
//! OpenCL kernel of independent FMA chains. Each GEMV shape rotates over enough copies of its
//! matrix to exceed 256 MiB (so the L2 cache does not serve it); times are the median of
//! per-launch device times (profiling events) and, separately, host wall time over
//! back-to-back launches. Every configuration's outputs are checked against an f64 reference
//! (GEMV: every output; GEMM: a sample of rows and columns).
//!
//! Environment: `MB_PARTS` (`limits,gemv,steps,gemm,other`; also `gemm-more`), `MB_REPS`
//! (launches timed, 60), `MB_COPY_MB` (1024), `MB_INT8` (`both`; `0` f32 only; `1` int8
//! only), `MB_GEMV_TYPES` / `MB_GEMM_TYPES` (`q4_0,q4_k,q6_k`), `MB_TILES` (`0,64,128`: GEMM
//! tile rows, 0 = the default choice), plus the crate's
//! `HETERO_OPENCL_*`. Output: `RESULT` lines and a table.
//!
//! `cargo run --release -p hetero-opencl-kernels --example mm_bench`

use half::f16;
use hetero_opencl_kernels::fast::{FastKernels, FastMatrix, Tuning};
use hetero_opencl_kernels::{self as ocl, reference, Device, GgmlType};
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Random GGUF bytes, values about `scale`.
fn matrix(r: &mut Rng, ty: GgmlType, n: usize, k: usize, scale: f32) -> Vec<u8> {
    let mut w = vec![0u8; ocl::matrix_bytes(ty, n, k).expect("shape")];
    for c in w.chunks_mut(8) {
        let v = r.next().to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
    let h = |v: f32| f16::from_f32(v).to_le_bytes();
    if ty == GgmlType::F16 {
        for c in w.chunks_exact_mut(2) {
            c.copy_from_slice(&h((r.unit() * 2.0 - 1.0) * scale));
        }
        return w;
    }
    let bb = ty.block().map_or(2, |b| b.1);
    let (d_at, d, m) = match ty {
        GgmlType::Q8_0 => (0, scale / 127.0, None),
        GgmlType::Q4_1 => (0, scale / 7.5, Some(-scale)),
        GgmlType::Q5_0 => (0, scale / 16.0, None),
        GgmlType::Q5_1 => (0, scale / 15.5, Some(-scale)),
        GgmlType::Q4K => (0, scale / (32.0 * 7.5), Some(scale / 32.0)),
        GgmlType::Q5K => (0, scale / (32.0 * 15.5), Some(scale / 32.0)),
        GgmlType::Q6K => (208, scale / (64.0 * 32.0), None),
        _ => (0, scale / 8.0, None),
    };
    for b in w.chunks_exact_mut(bb) {
        b[d_at..d_at + 2].copy_from_slice(&h(d * (0.5 + 0.5 * r.unit())));
        if let Some(m) = m {
            b[2..4].copy_from_slice(&h(m));
        }
    }
    w
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// f64 reference of rows `rows` (activation rows) and columns `cols` of `Y = X W^T`.
fn reference_sample(
    ty: GgmlType,
    w: &[u8],
    x: &[f32],
    k: usize,
    rows: &[usize],
    cols: &[usize],
) -> Vec<f32> {
    let rb = ocl::row_bytes(ty, k).unwrap();
    let out = std::sync::Mutex::new(vec![0f32; rows.len() * cols.len()]);
    let threads = std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .min(16);
    std::thread::scope(|s| {
        for t in 0..threads {
            let out = &out;
            s.spawn(move || {
                let mut row = vec![0f32; k];
                let mut part = Vec::new();
                for (ci, &c) in cols.iter().enumerate().skip(t).step_by(threads) {
                    reference::dequantize_row(ty, &w[c * rb..(c + 1) * rb], k, &mut row).unwrap();
                    for (ri, &m) in rows.iter().enumerate() {
                        let xr = &x[m * k..(m + 1) * k];
                        let v: f64 = row.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
                        part.push((ri * cols.len() + ci, v as f32));
                    }
                }
                let mut o = out.lock().unwrap();
                for (i, v) in part {
                    o[i] = v;
                }
            });
        }
    });
    out.into_inner().unwrap()
}

/// Median device time and host wall time per launch of `launches` run round-robin.
fn time(dev: &Arc<Device>, launches: &mut [ocl::Launch], reps: usize) -> Res<(f64, f64)> {
    for l in launches.iter_mut() {
        l.enqueue()?;
    }
    dev.finish()?;
    let mut dt = Vec::with_capacity(reps);
    let mut evs = Vec::with_capacity(reps);
    for i in 0..reps {
        let n = launches.len();
        evs.push(launches[i % n].enqueue_profiled()?);
    }
    for e in &evs {
        dt.push(e.seconds()?);
    }
    let t0 = Instant::now();
    for i in 0..reps {
        let n = launches.len();
        launches[i % n].enqueue()?;
    }
    dev.finish()?;
    let wall = t0.elapsed().as_secs_f64() / reps as f64;
    Ok((median(&mut dt), wall))
}

struct Limits {
    copy_gbs: f64,
    fma_tflops: f64,
}

fn limits(dev: &Arc<Device>) -> Res<Limits> {
    let bytes = env("MB_COPY_MB", "1024").parse::<usize>()? << 20;
    let (a, b) = (dev.alloc(bytes)?, dev.alloc(bytes)?);
    dev.copy(&a, &b, bytes)?;
    dev.finish()?;
    let mut ts = Vec::new();
    for _ in 0..7 {
        let t0 = Instant::now();
        for _ in 0..4 {
            dev.copy(&a, &b, bytes)?;
        }
        dev.finish()?;
        ts.push(t0.elapsed().as_secs_f64() / 4.0);
    }
    let copy_gbs = 2.0 * bytes as f64 / median(&mut ts) / 1e9;
    let fma_tflops = ocl::caps::fp32_fma_rate(dev, 16384, 7)? / 1e12;
    let items = dev.info().compute_units * 2048;
    println!(
        "limits: copy (read+write) {copy_gbs:.1} GB/s ({} MiB); OpenCL FP32 FMA {fma_tflops:.1} TFLOP/s ({items} work-items)",
        bytes >> 20
    );
    Ok(Limits {
        copy_gbs,
        fma_tflops,
    })
}

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    reference::nmse(a, b)
}

#[allow(clippy::too_many_arguments)]
fn gemv_case(
    dev: &Arc<Device>,
    kern: &mut [(&str, FastKernels)],
    lim: &Limits,
    r: &mut Rng,
    ty: GgmlType,
    n: usize,
    k: usize,
    tag: &str,
    steps: &[usize],
    reps: usize,
) -> Res<()> {
    let wq = matrix(r, ty, n, k, 0.5);
    let w0 = FastMatrix::upload(dev, ty, &wq, n, k)?;
    let bytes = w0.bytes();
    let copies = (256usize << 20).div_ceil(bytes).clamp(1, 64);
    let mut ws = vec![w0];
    for _ in 1..copies {
        ws.push(FastMatrix::upload(dev, ty, &wq, n, k)?);
    }
    let x: Vec<f32> = (0..k).map(|_| r.unit() * 2.0 - 1.0).collect();
    let xb = dev.upload(&x)?;
    let cols: Vec<usize> = (0..n).collect();
    let want = reference_sample(ty, &wq, &x, k, &[0], &cols);
    let y = dev.alloc(n * 4)?;
    for (name, fk) in kern.iter_mut() {
        if *name == "i8" && ty == GgmlType::F16 {
            continue;
        }
        for &st in steps {
            fk.set_tuning(Tuning {
                gemm_rows: 0,
                gemv_steps: st,
            });
            let mut ls = Vec::new();
            for w in &ws {
                match fk.gemv(w, &xb, &y, None) {
                    Ok(l) => ls.push(l),
                    Err(e) => {
                        println!("{tag} {ty} {n}x{k} {name} steps {st}: {e}");
                        break;
                    }
                }
            }
            if ls.is_empty() {
                continue;
            }
            y.write(&vec![f32::NAN; n])?;
            ls[0].enqueue()?;
            let mut got = vec![0f32; n];
            y.read(&mut got)?;
            let e = nmse(&got, &want);
            let (dt, wall) = time(dev, &mut ls, reps)?;
            let gbs = bytes as f64 / dt / 1e9;
            println!(
                "RESULT gemv {tag} {ty} {n}x{k} {name} steps {st}: {:.1} us device ({gbs:.0} GB/s, {:.2} of copy), {:.1} us wall; {:.1} MB; nmse {e:.1e}",
                dt * 1e6,
                gbs / lim.copy_gbs,
                wall * 1e6,
                bytes as f64 / 1e6
            );
        }
        fk.set_tuning(Tuning::default());
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn gemm_case(
    dev: &Arc<Device>,
    fk: &mut FastKernels,
    lim: &Limits,
    r: &mut Rng,
    ty: GgmlType,
    m: usize,
    n: usize,
    k: usize,
    tag: &str,
    reps: usize,
) -> Res<()> {
    let wq = matrix(r, ty, n, k, 0.5);
    let w = FastMatrix::upload(dev, ty, &wq, n, k)?;
    let x: Vec<f32> = (0..m * k).map(|_| r.unit() * 2.0 - 1.0).collect();
    let xb = dev.upload(&x)?;
    let y = dev.alloc(m * n * 4)?;
    let rows: Vec<usize> = [0, 1, m / 2, m - 1]
        .into_iter()
        .filter(|&v| v < m)
        .collect();
    let cols: Vec<usize> = (0..n).step_by((n / 256).max(1)).collect();
    let want = reference_sample(ty, &wq, &x, k, &rows, &cols);
    let tiles: Vec<usize> = env("MB_TILES", "0,64,128")
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    for &mt in &tiles {
        fk.set_tuning(Tuning {
            gemm_rows: mt,
            gemv_steps: 0,
        });
        let mut l = match fk.gemm(&w, &xb, m, &y, None) {
            Ok(l) => l,
            Err(e) => {
                println!("{tag} {ty} gemm tile {mt}: {e}");
                continue;
            }
        };
        y.write(&vec![f32::NAN; m * n])?;
        l.enqueue()?;
        let mut all = vec![0f32; m * n];
        y.read(&mut all)?;
        let got: Vec<f32> = rows
            .iter()
            .flat_map(|&i| cols.iter().map(move |&c| (i, c)))
            .map(|(i, c)| all[i * n + c])
            .collect();
        let e = nmse(&got, &want);
        let (dt, wall) = time(dev, std::slice::from_mut(&mut l), reps.min(20))?;
        let tf = 2.0 * m as f64 * n as f64 * k as f64 / dt / 1e12;
        println!(
            "RESULT gemm {tag} {ty} m {m} {n}x{k} tile {}: {:.1} us device ({tf:.1} TFLOP/s, {:.2} of FMA), {:.1} us wall; nmse {e:.1e}",
            if mt == 0 { "auto".to_string() } else { mt.to_string() },
            dt * 1e6,
            tf / lim.fma_tflops,
            wall * 1e6
        );
    }
    fk.set_tuning(Tuning::default());
    Ok(())
}

fn main() -> Res<()> {
    let dev = Device::from_env_with(true)?;
    let info = dev.info();
    println!(
        "device: {} / {} | {} | {} CUs, max work-group {}, local {} KiB",
        info.platform_name,
        info.name,
        info.driver_version,
        info.compute_units,
        info.max_work_group_size,
        info.local_mem_size >> 10
    );
    let (dot, note) = ocl::caps::int_dot(&dev);
    println!("int8 dot: {dot:?} {}", note.unwrap_or_default());
    let parts = env("MB_PARTS", "limits,gemv,steps,gemm,other");
    let reps: usize = env("MB_REPS", "60").parse()?;
    let lim = if parts.contains("limits") {
        limits(&dev)?
    } else {
        Limits {
            copy_gbs: 4276.0,
            fma_tflops: 56.3,
        }
    };
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::F16,
    ];
    let t0 = Instant::now();
    let mut kern: Vec<(&str, FastKernels)> = Vec::new();
    let which = env("MB_INT8", "both");
    if which != "1" {
        kern.push(("f32", FastKernels::new(&dev, &types, Some(false))?));
    }
    if which != "0" {
        kern.push(("i8", FastKernels::new(&dev, &types, Some(true))?));
    }
    println!("built in {:.1} s", t0.elapsed().as_secs_f64());
    let mut r = Rng(0x1234_5678_9abc_def1);
    let b8 = [
        ("8b-qkv", 6144, 4096),
        ("8b-o", 4096, 4096),
        ("8b-gateup", 28672, 4096),
        ("8b-down", 4096, 14336),
    ];
    let b1 = [
        ("1b-qkv", 3072, 2048),
        ("1b-o", 2048, 2048),
        ("1b-gateup", 16384, 2048),
        ("1b-down", 2048, 8192),
    ];
    let tys = |name: &str, default: &str| -> Vec<GgmlType> {
        env(name, default)
            .split(',')
            .filter_map(|t| match t.trim() {
                "q4_0" => Some(GgmlType::Q4_0),
                "q4_k" => Some(GgmlType::Q4K),
                "q6_k" => Some(GgmlType::Q6K),
                "q8_0" => Some(GgmlType::Q8_0),
                _ => None,
            })
            .collect()
    };
    if parts.contains("gemv") {
        for ty in tys("MB_GEMV_TYPES", "q4_0,q4_k,q6_k") {
            for (tag, n, k) in b8 {
                gemv_case(&dev, &mut kern, &lim, &mut r, ty, n, k, tag, &[0], reps)?;
            }
        }
        for (tag, n, k) in b1 {
            gemv_case(
                &dev,
                &mut kern,
                &lim,
                &mut r,
                GgmlType::Q4_0,
                n,
                k,
                tag,
                &[0],
                reps,
            )?;
        }
        gemv_case(
            &dev,
            &mut kern,
            &lim,
            &mut r,
            GgmlType::Q6K,
            128256,
            4096,
            "8b-head",
            &[0],
            reps,
        )?;
        gemv_case(
            &dev,
            &mut kern,
            &lim,
            &mut r,
            GgmlType::Q8_0,
            128256,
            2048,
            "1b-head",
            &[0],
            reps,
        )?;
    }
    if parts.contains("steps") {
        for (tag, n, k) in b8 {
            gemv_case(
                &dev,
                &mut kern,
                &lim,
                &mut r,
                GgmlType::Q4_0,
                n,
                k,
                tag,
                &[1, 2, 4, 8],
                reps,
            )?;
        }
    }
    if parts.contains("other") {
        for ty in [
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q5K,
            GgmlType::F16,
        ] {
            gemv_case(
                &dev,
                &mut kern,
                &lim,
                &mut r,
                ty,
                14336,
                4096,
                "14336x4096",
                &[0],
                reps,
            )?;
        }
    }
    if parts.contains("gemm") {
        let fk = &mut kern[0].1;
        for ty in tys("MB_GEMM_TYPES", "q4_0,q4_k,q6_k") {
            for (tag, n, k) in b8 {
                gemm_case(&dev, fk, &lim, &mut r, ty, 512, n, k, tag, reps)?;
            }
        }
        if parts.contains("gemm-more") {
            gemm_case(
                &dev,
                fk,
                &lim,
                &mut r,
                GgmlType::Q4_0,
                512,
                16384,
                2048,
                "1b-gateup",
                reps,
            )?;
            gemm_case(
                &dev,
                fk,
                &lim,
                &mut r,
                GgmlType::F16,
                512,
                28672,
                4096,
                "8b-gateup",
                reps,
            )?;
            gemm_case(
                &dev,
                fk,
                &lim,
                &mut r,
                GgmlType::Q4_0,
                128,
                28672,
                4096,
                "8b-gateup-m128",
                reps,
            )?;
        }
    }
    println!("total {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}
