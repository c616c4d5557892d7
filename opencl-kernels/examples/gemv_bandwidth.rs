//! Achieved GB/s of the GEMV kernels for the decode shapes (N, K) in {(4096, 4096),
//! (14336, 4096), (4096, 14336), (49152, 576)}, FP16, Q4_0, Q4_1 and Q8_0, against the device's
//! copy bandwidth measured in the same run.
//!
//! Bytes counted per GEMV: weights + x (K f32) + y (N f32), each once. Copy bandwidth counts
//! bytes read + bytes written. Several copies of each weight matrix are rotated so that repeated
//! launches do not run out of the last-level cache (`BW_ROTATE_MB`, default 512). Each variant's
//! output is checked against the CPU reference (NMSE <= 1e-8) before it is timed.
//!
//! Environment: the crate's (`HETERO_OPENCL_LIB`, `HETERO_OPENCL_PLATFORM`, ...), plus
//! `BW_LIB` (load exactly this library), `BW_ROTATE_MB`, `BW_MIN_SECONDS` (per variant, default
//! 0.2), `BW_COPY_MB` (copy size, default 1024 on GPUs, 256 otherwise), `BW_SHAPES` ("NxK,..."),
//! `BW_DEFAULT_ONLY` (skip the work-group shape sweeps), `BW_F16_SWEEP` (sweep FP16 shapes too),
//! `BW_LEGACY` (also the earlier Q4_0 layouts: GGUF swept, "relayout" SoA, "x4"), `BW_DUMP`
//! (write the program binaries, PTX on NVIDIA, to this path and `<path>.dp4a`; with
//! `BW_DUMP_ONLY`, then exit). Q4_0 and Q4_1 run in the GGUF layout and the T layout
//! (`relayout_q4_t`, swept for Q4_0), Q8_0 in the GGUF layout; where the platform is NVIDIA's, the
//! dp4a variant (int8 activations, checked at NMSE <= 1e-4) runs too.

use half::f16;
use hetero_opencl_kernels::{
    self as ocl, reference, relayout_q4_0, relayout_q4_0_len, relayout_q4_t, relayout_q4_t_len,
    Api, Buffer, Device, GgmlType, Kernels, Launch, RowShape,
};
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn env_f(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Random but realistic weights: f16 values in +-[0.5, 1) (no NaN/denormals), block formats
/// with random quants, small positive scales (and Q4_1 mins in +-0.1).
fn weights(r: &mut Rng, f: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let mut w = vec![0u8; ocl::matrix_bytes(f, n, k).unwrap()];
    r.fill(&mut w);
    match f {
        GgmlType::F16 => {
            for c in w.chunks_exact_mut(2) {
                let bits = (u16::from_le_bytes([c[0], c[1]]) & 0x83ff) | 0x3800;
                c.copy_from_slice(&bits.to_le_bytes());
            }
        }
        _ => {
            for b in w.chunks_exact_mut(f.block().map_or(2, |b| b.1)) {
                let d = 0.001 + (b[0] as f32) / 255.0 * 0.05;
                b[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                if f == GgmlType::Q4_1 {
                    let m = ((b[2] as f32) / 255.0 - 0.5) * 0.2;
                    b[2..4].copy_from_slice(&f16::from_f32(m).to_le_bytes());
                }
            }
        }
    }
    w
}

/// Times `launches` rotated until at least `min_s` seconds; returns seconds per launch
/// measured two ways: host wall clock over back-to-back launches (includes launch gaps), and
/// the median device time of the kernels themselves (profiling events).
fn time(dev: &Device, launches: &mut [Launch], min_s: f64) -> Res<(f64, f64)> {
    for l in launches.iter_mut() {
        l.enqueue()?;
    }
    dev.finish()?;
    let mut iters = launches.len();
    let host = loop {
        let t = Instant::now();
        for i in 0..iters {
            let j = i % launches.len();
            launches[j].enqueue()?;
        }
        dev.finish()?;
        let s = t.elapsed().as_secs_f64();
        if s >= min_s || iters > 1 << 20 {
            break s / iters as f64;
        }
        iters = ((iters as f64) * (min_s / s.max(1e-6)) * 1.2).ceil() as usize;
    };
    let n = iters.clamp(launches.len(), 2000);
    let mut evs = Vec::with_capacity(n);
    for i in 0..n {
        let j = i % launches.len();
        evs.push(launches[j].enqueue_profiled()?);
    }
    dev.finish()?;
    let mut ks: Vec<f64> = evs.iter().map(|e| e.seconds()).collect::<Result<_, _>>()?;
    ks.sort_by(|a, b| a.total_cmp(b));
    Ok((host, ks[ks.len() / 2]))
}

struct Row {
    shape: (usize, usize),
    what: String,
    gbs: f64,
    kgbs: f64,
}

fn main() -> Res<()> {
    let api = match std::env::var("BW_LIB") {
        Ok(p) => Api::load_from(&p)?,
        Err(_) => Api::load()?,
    };
    eprintln!("library: {}", api.path());
    let dev = Device::open_with(
        Arc::new(api),
        std::env::var("HETERO_OPENCL_PLATFORM")
            .ok()
            .map(|s| hetero_opencl_kernels::Selector::parse(&s))
            .as_ref(),
        std::env::var("HETERO_OPENCL_DEVICE")
            .ok()
            .map(|s| hetero_opencl_kernels::Selector::parse(&s))
            .as_ref(),
        true,
    )?;
    let info = dev.info().clone();
    println!(
        "device: {} / {} | driver {} | {} | global mem {} MiB | max wg {} | base align {} B | unified {}",
        info.platform_name,
        info.name,
        info.driver_version,
        info.platform_version,
        info.global_mem_size >> 20,
        info.max_work_group_size,
        info.base_addr_align,
        info.host_unified_memory
    );
    println!("extensions: {}", info.extensions.join(" "));
    let t = Instant::now();
    let mut k = Kernels::new(&dev)?;
    match k.enable_dp4a() {
        Ok(()) => println!("dp4a variant: built"),
        Err(e) => println!("dp4a variant: {e}"),
    }
    let k = k;
    println!(
        "program: {:.2} s (from cache: {})",
        t.elapsed().as_secs_f64(),
        k.from_cache()
    );
    if let Ok(path) = std::env::var("BW_DUMP") {
        // Write the program binary (PTX on NVIDIA) and stop.
        std::fs::write(&path, k.binary()?)?;
        println!("program binary written to {path}");
        if let Some(b) = k.dp4a_binary() {
            std::fs::write(format!("{path}.dp4a"), b?)?;
            println!("dp4a program binary written to {path}.dp4a");
        }
        if std::env::var_os("BW_DUMP_ONLY").is_some() {
            return Ok(());
        }
    }
    let gpu = !info.host_unified_memory;
    let min_s = env_f("BW_MIN_SECONDS", 0.2);
    let rotate = (env_f("BW_ROTATE_MB", 512.0) * 1048576.0) as usize;

    // Copy bandwidth: clEnqueueCopyBuffer and a plain 16-byte copy kernel.
    let copy_bytes = (env_f("BW_COPY_MB", if gpu { 1024.0 } else { 256.0 }) * 1048576.0) as usize;
    let copy_bytes = copy_bytes / 16 * 16;
    let (src, dst) = (dev.alloc(copy_bytes)?, dev.alloc(copy_bytes)?);
    {
        let mut r = Rng(7);
        let mut h = vec![0u8; copy_bytes];
        r.fill(&mut h);
        src.write(&h)?;
    }
    let copy_s;
    {
        dev.copy(&src, &dst, copy_bytes)?;
        dev.finish()?;
        let mut iters = 1;
        loop {
            let t = Instant::now();
            for _ in 0..iters {
                dev.copy(&src, &dst, copy_bytes)?;
            }
            dev.finish()?;
            let s = t.elapsed().as_secs_f64();
            if s >= min_s {
                copy_s = s / iters as f64;
                break;
            }
            iters *= 2;
        }
    }
    let copy_gbs = 2.0 * copy_bytes as f64 / copy_s / 1e9;
    let mut ck = [k.copy_kernel(&src, &dst, copy_bytes)?];
    let kcopy_gbs = 2.0 * copy_bytes as f64 / time(&dev, &mut ck, min_s)?.1 / 1e9;
    drop(ck);
    drop((src, dst));
    println!(
        "copy bandwidth (read+write, {} MiB): clEnqueueCopyBuffer {:.1} GB/s, copy kernel {:.1} GB/s",
        copy_bytes >> 20,
        copy_gbs,
        kcopy_gbs
    );

    let shapes: Vec<(usize, usize)> = match std::env::var("BW_SHAPES") {
        Ok(s) => s
            .split(',')
            .filter_map(|p| {
                let (a, b) = p.split_once('x')?;
                Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
            })
            .collect(),
        Err(_) => vec![(4096, 4096), (14336, 4096), (4096, 14336), (49152, 576)],
    };
    let default_only = std::env::var_os("BW_DEFAULT_ONLY").is_some();
    let sweep: Vec<Option<RowShape>> = std::iter::once(None)
        .chain(
            [
                (4, 64),
                (8, 32),
                (16, 16),
                (32, 8),
                (64, 4),
                (128, 2),
                (256, 1),
            ]
            .iter()
            .map(|&(tpr, rows)| {
                Some(RowShape {
                    tpr,
                    rows,
                    per_item: 1,
                    unroll: 0,
                })
            })
            .filter(|_| !default_only),
        )
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut streams: Vec<Row> = Vec::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let legacy = std::env::var_os("BW_LEGACY").is_some();
    // Checks one variant's output against the reference, then times it and records a row.
    let mut measure = |n: usize,
                       kk: usize,
                       name: String,
                       bytes: f64,
                       want: &[f32],
                       bound: f64,
                       by: &Buffer,
                       ls: &mut [Launch]|
     -> Res<()> {
        by.write(&vec![f32::NAN; n])?;
        ls[0].enqueue()?;
        let mut got = vec![0f32; n];
        by.read(&mut got)?;
        let e = reference::nmse(&got, want);
        if e.is_nan() || e > bound {
            println!("{n}x{kk} {name}: WRONG, NMSE {e:e}");
            return Ok(());
        }
        let (sec, ksec) = time(&dev, ls, min_s)?;
        let gbs = bytes / sec / 1e9;
        let kgbs = bytes / ksec / 1e9;
        println!(
            "{n}x{kk} {name}: {:.1} us, {gbs:.1} GB/s ({:.0}% of copy) | kernel {:.1} us, {kgbs:.1} GB/s ({:.0}%) | nmse {e:.1e}",
            sec * 1e6,
            100.0 * gbs / copy_gbs,
            ksec * 1e6,
            100.0 * kgbs / copy_gbs
        );
        rows.push(Row {
            shape: (n, kk),
            what: name,
            gbs,
            kgbs,
        });
        Ok(())
    };
    // T-layout sweep: (rows per work-item, units in flight per row) x (work-items per row,
    // row slots per group).
    let t_sweep: Vec<Option<RowShape>> = std::iter::once(None)
        .chain(
            [
                (1usize, 1usize),
                (1, 4),
                (2, 1),
                (2, 2),
                (2, 4),
                (4, 1),
                (4, 2),
            ]
            .iter()
            .flat_map(|&(per_item, unroll)| {
                [
                    (8, 32),
                    (16, 16),
                    (32, 8),
                    (64, 4),
                    (32, 4),
                    (128, 2),
                    (256, 1),
                ]
                .into_iter()
                .map(move |(tpr, rows)| {
                    Some(RowShape {
                        tpr,
                        rows,
                        per_item,
                        unroll,
                    })
                })
            })
            .filter(|_| !default_only),
        )
        .collect();
    let sname = |s: Option<RowShape>| {
        s.map(|s| format!("r{}u{} {}x{}", s.per_item, s.unroll, s.tpr, s.rows))
            .unwrap_or("default".into())
    };
    // Launch floor: back-to-back launches of a kernel that reads 16 bytes.
    {
        let (src, out) = (dev.alloc(1 << 20)?, dev.alloc(64)?);
        let mut l = [k.stream_read(&src, &out, 16, 0x9e37_79b9)?];
        let (h, kt) = time(&dev, &mut l, min_s)?;
        println!(
            "launch floor (stream_read of 16 B, back-to-back): {:.1} us host / {:.1} us kernel",
            h * 1e6,
            kt * 1e6
        );
    }
    let formats: &[GgmlType] = if legacy {
        &[GgmlType::F16, GgmlType::Q4_0]
    } else {
        &[
            GgmlType::F16,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
        ]
    };
    for &(n, kk) in &shapes {
        let x: Vec<f32> = (0..kk).map(|_| rng.f32()).collect();
        let bx = dev.upload(&x)?;
        let by = dev.alloc(n * 4)?;
        let io = (kk * 4 + n * 4) as f64;
        for &f in formats {
            let w = weights(&mut rng, f, n, kk);
            let wb = w.len();
            let bytes = wb as f64 + io;
            let copies = rotate.div_ceil(wb).clamp(1, 16);
            let want = reference::gemm(f, &w, &x, 1, n, kk)?;
            // The ceiling for this many bytes: a read-only stream of the same size (rotated
            // copies as for the GEMVs), launch costs included.
            if f != GgmlType::Q4_1 {
                let sb = wb / 16 * 16;
                let srcs: Vec<Buffer> = (0..copies)
                    .map(|_| dev.alloc(sb))
                    .collect::<Result<_, _>>()?;
                let out = dev.alloc(64)?;
                let mut ls: Vec<Launch> = Vec::new();
                for b in &srcs {
                    ls.push(k.stream_read(b, &out, sb, 0x9e37_79b9)?);
                }
                let (h, kt) = time(&dev, &mut ls, min_s)?;
                let (g, kg) = (sb as f64 / h / 1e9, sb as f64 / kt / 1e9);
                println!(
                    "{n}x{kk} stream_read of the {f:?} bytes ({:.1} MB): {:.1} us, {g:.1} GB/s ({:.0}% of copy) | kernel {:.1} us, {kg:.1} GB/s ({:.0}%)",
                    sb as f64 / 1e6,
                    h * 1e6,
                    100.0 * g / copy_gbs,
                    kt * 1e6,
                    100.0 * kg / copy_gbs
                );
                streams.push(Row {
                    shape: (n, kk),
                    what: format!("stream {f:?}"),
                    gbs: g,
                    kgbs: kg,
                });
            }
            // GGUF layout (AoS): FP16 swept (1 and 2 rows per item), block formats default
            // (plus the sweep with BW_LEGACY).
            {
                let bufs: Vec<Buffer> = (0..copies)
                    .map(|_| dev.upload(&w))
                    .collect::<Result<_, _>>()?;
                let per_items: &[usize] = if f == GgmlType::F16 { &[1, 2] } else { &[1] };
                let f16_sweep = std::env::var_os("BW_F16_SWEEP").is_some();
                let sw: &[Option<RowShape>] = if legacy || (f == GgmlType::F16 && f16_sweep) {
                    &sweep
                } else {
                    &sweep[..1]
                };
                for (per_item, s) in per_items
                    .iter()
                    .flat_map(|&p| sw.iter().map(move |s| (p, s)))
                    .filter(|(p, s)| *p == 1 || s.is_some())
                {
                    let s = s.map(|s| RowShape { per_item, ..s });
                    let mut ls: Vec<Launch> = Vec::new();
                    for b in &bufs {
                        ls.push(k.gemv_with(f, b, &bx, &by, n, kk, s)?);
                    }
                    measure(
                        n,
                        kk,
                        format!("{f:?} {}", sname(s)),
                        bytes,
                        &want,
                        1e-8,
                        &by,
                        &mut ls,
                    )?;
                }
            }
            // T layout (Q4_0, Q4_1): the full sweep.
            if matches!(f, GgmlType::Q4_0 | GgmlType::Q4_1) {
                let (nq, nd) = relayout_q4_t_len(f, n, kk)?;
                let (mut q, mut d) = (vec![0u8; nq], vec![0u8; nd]);
                relayout_q4_t(f, &w, n, kk, &mut q, &mut d)?;
                let bufs: Vec<(Buffer, Buffer)> = (0..copies)
                    .map(|_| {
                        Ok::<_, hetero_opencl_kernels::Error>((dev.upload(&q)?, dev.upload(&d)?))
                    })
                    .collect::<Result<_, _>>()?;
                let sw: &[Option<RowShape>] = if f == GgmlType::Q4_0 {
                    &t_sweep
                } else {
                    &t_sweep[..t_sweep.len().min(1)]
                };
                for s in sw {
                    let mut ls: Vec<Launch> = Vec::new();
                    for (bq, bd) in &bufs {
                        ls.push(k.gemv_q4_t(f, bq, bd, &bx, &by, n, kk, *s)?);
                    }
                    let name = format!("{f:?}-T {}", sname(*s));
                    measure(n, kk, name, bytes, &want, 1e-8, &by, &mut ls)?;
                }
            }
            // NVIDIA-only dp4a variant on the T layout (int8 activations: NMSE bound 1e-4;
            // uniform activations quantized to 8 bits give ~1.5e-5).
            if f == GgmlType::Q4_0 && k.has_dp4a() {
                let (nq, nd) = relayout_q4_t_len(f, n, kk)?;
                let (mut q, mut d) = (vec![0u8; nq], vec![0u8; nd]);
                relayout_q4_t(f, &w, n, kk, &mut q, &mut d)?;
                let bufs: Vec<(Buffer, Buffer)> = (0..copies)
                    .map(|_| {
                        Ok::<_, hetero_opencl_kernels::Error>((dev.upload(&q)?, dev.upload(&d)?))
                    })
                    .collect::<Result<_, _>>()?;
                let (nxq, nxs) = Kernels::quantize_x_q8w_len(kk)?;
                let (bxq, bxs) = (dev.alloc(nxq)?, dev.alloc(nxs)?);
                let mut ql = [k.quantize_x_q8w(&bx, &bxq, &bxs, kk)?];
                let (qh, qk) = time(&dev, &mut ql, min_s.min(0.05))?;
                println!(
                    "{n}x{kk} quantize_x_q8w (once per activation vector): {:.1} us host / {:.1} us kernel",
                    qh * 1e6,
                    qk * 1e6
                );
                let sw: Vec<Option<RowShape>> = if default_only {
                    vec![None]
                } else {
                    t_sweep.clone()
                };
                for s in sw {
                    let mut ls: Vec<Launch> = Vec::new();
                    for (bq, bd) in &bufs {
                        ls.push(k.gemv_q4_0_t_dp4a(bq, bd, &bxq, &bxs, &by, n, kk, s)?);
                    }
                    let name = format!("Q4_0-T-dp4a {}", sname(s));
                    measure(n, kk, name, bytes, &want, 1e-4, &by, &mut ls)?;
                }
            }
            if f == GgmlType::Q4_0 && legacy {
                let (nq, nd) = relayout_q4_0_len(n, kk)?;
                let (mut q, mut d) = (vec![0u8; nq], vec![0u8; nd]);
                relayout_q4_0(&w, n, kk, &mut q, &mut d)?;
                let bufs: Vec<(Buffer, Buffer)> = (0..copies)
                    .map(|_| {
                        Ok::<_, hetero_opencl_kernels::Error>((dev.upload(&q)?, dev.upload(&d)?))
                    })
                    .collect::<Result<_, _>>()?;
                for per_item in [1, 2, 4] {
                    for s in sweep.iter().filter(|s| per_item == 1 || s.is_some()) {
                        let s = s.map(|s| RowShape { per_item, ..s });
                        let mut ls: Vec<Launch> = Vec::new();
                        for (bq, bd) in &bufs {
                            ls.push(k.gemv_q4_0_soa(bq, bd, &bx, &by, n, kk, s)?);
                        }
                        let name = format!("Q4_0-relayout {}", sname(s));
                        measure(n, kk, name, bytes, &want, 1e-8, &by, &mut ls)?;
                    }
                }
                drop(bufs);
                let (nq, nd) = hetero_opencl_kernels::relayout_q4_0_x4_len(n, kk)?;
                let (mut q, mut d) = (vec![0u8; nq], vec![0u8; nd]);
                hetero_opencl_kernels::relayout_q4_0_x4(&w, n, kk, &mut q, &mut d)?;
                let bufs: Vec<(Buffer, Buffer)> = (0..copies)
                    .map(|_| {
                        Ok::<_, hetero_opencl_kernels::Error>((dev.upload(&q)?, dev.upload(&d)?))
                    })
                    .collect::<Result<_, _>>()?;
                for s in &sweep {
                    let mut ls: Vec<Launch> = Vec::new();
                    for (bq, bd) in &bufs {
                        ls.push(k.gemv_q4_0_x4(bq, bd, &bx, &by, n, kk, *s)?);
                    }
                    let name = format!("Q4_0-x4 {}", sname(*s));
                    measure(n, kk, name, bytes, &want, 1e-8, &by, &mut ls)?;
                }
            }
        }
    }

    rows.extend(streams);
    println!("\nSUMMARY (copy {copy_gbs:.1} GB/s read+write; copy kernel {kcopy_gbs:.1} GB/s)");
    println!("GB/s from host wall clock over back-to-back launches / from kernel device time (profiling events), % of copy");
    println!("| N x K | FP16 default | FP16 best | stream of FP16 bytes | Q4_0 GGUF default | Q4_0-T default | Q4_0-T best | Q4_0-T-dp4a default | Q4_0-T-dp4a best | stream of Q4_0 bytes | Q4_1 GGUF default | Q4_1-T default | Q8_0 GGUF default |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &(n, kk) in &shapes {
        let of = |pred: &dyn Fn(&str) -> bool, kernel: bool| {
            rows.iter()
                .filter(|r| r.shape == (n, kk) && pred(&r.what))
                .max_by(|a, b| {
                    if kernel {
                        a.kgbs.total_cmp(&b.kgbs)
                    } else {
                        a.gbs.total_cmp(&b.gbs)
                    }
                })
        };
        let fmt = |pred: &dyn Fn(&str) -> bool, name: bool| match (of(pred, false), of(pred, true))
        {
            (Some(h), Some(k)) => {
                let mut s = format!(
                    "{:.0} ({:.0}%) / {:.0} ({:.0}%)",
                    h.gbs,
                    100.0 * h.gbs / copy_gbs,
                    k.kgbs,
                    100.0 * k.kgbs / copy_gbs
                );
                if name {
                    s += &format!(" [{} / {}]", h.what, k.what);
                }
                s
            }
            _ => "-".into(),
        };
        println!(
            "| {n} x {kk} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt(&|w| w == "F16 default", false),
            fmt(&|w| w.starts_with("F16"), true),
            fmt(&|w| w == "stream F16", false),
            fmt(&|w| w == "Q4_0 default", false),
            fmt(&|w| w == "Q4_0-T default", false),
            fmt(&|w| w.starts_with("Q4_0-T "), true),
            fmt(&|w| w == "Q4_0-T-dp4a default", false),
            fmt(&|w| w.starts_with("Q4_0-T-dp4a"), true),
            fmt(&|w| w == "stream Q4_0", false),
            fmt(&|w| w == "Q4_1 default", false),
            fmt(&|w| w == "Q4_1-T default", false),
            fmt(&|w| w == "Q8_0 default", false),
        );
    }
    Ok(())
}
