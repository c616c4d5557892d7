//! Device time of the attention kernels at real head shapes: the tiled (flash-style) prefill
//! against the previous row-wise kernel over a whole causal prompt, and the split decode
//! against the previous per-head kernel at several positions, in each KV type asked for. Each
//! new kernel's output is first checked against the previous kernel's on the device (NMSE).
//! Then a host-memory probe: what a large device buffer costs in resident host memory
//! (`VmRSS`/`VmHWM` of /proc/self/status) as a plain `CL_MEM_READ_WRITE` buffer and as a
//! `CL_MEM_HOST_NO_ACCESS` one, after creation, after sub-buffers over it and after a kernel
//! read it whole.
//!
//! Environment: `ATT_SHAPES` (heads/kv_heads/head_dim, default `32/8/128,32/8/64`: Llama-3-8B,
//! Llama-3.2-1B), `ATT_PP` (prompt lengths, default `512,4096`), `ATT_POS` (decode positions,
//! default `32,512,4096`), `ATT_KV` (default `f16,f32`), `ATT_REPS` (default 3, medians),
//! `ATT_OLD_MAX` (longest prompt the row-wise kernel is timed at, default 4096),
//! `ATT_PROBE_MIB` (probe buffer, default 8192; 0 skips), and the crate's (`HETERO_OPENCL_*`).

use half::f16;
use hetero_opencl_kernels::{
    reference, Attention, AttentionShape, AttnLaunch, Buffer, Device, KvType,
};
use std::sync::Arc;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Rng(u64);
impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

/// A cache of `rows` positions holding `v` in `kv` (f32 or f16; q8_0 through the device).
fn cache(dev: &Arc<Device>, att: &Attention, v: &[f32], rows: usize) -> Res<Buffer> {
    let kvd = att.shape().kv_dim();
    Ok(match att.shape().kv {
        KvType::F32 => dev.upload(&v[..rows * kvd])?,
        KvType::F16 => {
            let h: Vec<u16> = v[..rows * kvd]
                .iter()
                .map(|x| f16::from_f32(*x).to_bits())
                .collect();
            dev.upload(&h)?
        }
        KvType::Q8_0 => {
            let c = dev.alloc(att.cache_bytes(rows)?)?;
            let chunk = 512.min(rows);
            let s = dev.alloc(chunk * kvd * 4)?;
            let mut st = att.store_q8(&s, &s, &c, &c, chunk)?;
            let mut p = 0;
            while p < rows {
                let m = chunk.min(rows - p);
                s.write(&v[p * kvd..(p + m) * kvd])?;
                st.set(p, m)?;
                st.enqueue()?;
                dev.finish()?;
                p += m;
            }
            c
        }
    })
}

/// Median device seconds of `reps` runs of `l` at (pos0, m).
fn time(l: &mut AttnLaunch, pos0: usize, m: usize, reps: usize) -> Res<f64> {
    l.set(pos0, m)?;
    l.enqueue()?; // warm-up
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        v.push(l.launch().enqueue_profiled()?.seconds()?);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

fn read(b: &Buffer, n: usize) -> Res<Vec<f32>> {
    let mut v = vec![0f32; b.len() / 4];
    b.read(&mut v)?;
    v.truncate(n);
    Ok(v)
}

fn shapes() -> Res<Vec<(usize, usize, usize)>> {
    env_list("ATT_SHAPES", "32/8/128,32/8/64")
        .iter()
        .map(|s| {
            let p: Vec<usize> = s.split('/').map(|x| x.parse()).collect::<Result<_, _>>()?;
            match p[..] {
                [a, b, c] => Ok((a, b, c)),
                _ => Err(format!("ATT_SHAPES entry {s}: heads/kv_heads/head_dim").into()),
            }
        })
        .collect()
}

fn main() -> Res<()> {
    let dev = Device::from_env_with(true)?;
    let info = dev.info();
    println!(
        "device: {} / {} ({} compute units, {} KiB local memory)",
        info.platform_name,
        info.name,
        info.compute_units,
        info.local_mem_size >> 10
    );
    let pps: Vec<usize> = env_list("ATT_PP", "512,4096")
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let poss: Vec<usize> = env_list("ATT_POS", "32,512,4096")
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let reps = env_usize("ATT_REPS", 3).max(1);
    let old_max = env_usize("ATT_OLD_MAX", 4096);
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for (heads, kv_heads, head_dim) in shapes()? {
        for kv in env_list("ATT_KV", "f16,f32") {
            let kv = match kv.as_str() {
                "f32" => KvType::F32,
                "f16" => KvType::F16,
                "q8_0" => KvType::Q8_0,
                o => return Err(format!("ATT_KV: {o}").into()),
            };
            let s = AttentionShape {
                heads,
                kv_heads,
                head_dim,
                kv,
            };
            let att = Attention::new(&dev, s)?;
            let n = pps.iter().chain(&poss).copied().max().unwrap_or(1) + 1;
            let (dq, kvd) = (s.q_dim(), s.kv_dim());
            let kc = cache(&dev, &att, &rng.vec(n * kvd), n)?;
            let vc = cache(&dev, &att, &rng.vec(n * kvd), n)?;
            let max_m = pps.iter().copied().max().unwrap_or(1);
            let q = dev.upload(&rng.vec(max_m * dq))?;
            let (o1, o2) = (dev.alloc(max_m * dq * 4)?, dev.alloc(max_m * dq * 4)?);
            let mut flash = att.prefill(&q, &kc, &vc, &o1, max_m)?;
            let mut old = att.prefill_rowwise(&q, &kc, &vc, &o2, max_m)?;
            println!(
                "shape {heads}/{kv_heads}x{head_dim} kv {kv}: tiles {:?}",
                att.tiles()
            );
            for &m in &pps {
                // Causal over the whole prompt: sum_i (i + 1) positions, 4 flops each (q.k and
                // p.v multiply-adds) per query head and dimension.
                let flops = 4.0 * (heads * head_dim) as f64 * (m * (m + 1) / 2) as f64;
                let tf = time(&mut flash, 0, m, reps)?;
                let (to, e) = if m <= old_max {
                    let to = time(&mut old, 0, m, reps)?;
                    let e = reference::nmse(&read(&o1, m * dq)?, &read(&o2, m * dq)?);
                    (Some(to), Some(e))
                } else {
                    (None, None)
                };
                println!(
                    "  prefill m={m:>5}: flash {:>9.3} ms ({:>6.2} TFLOP/s), rowwise {}, \
                     flash/rowwise NMSE {}",
                    tf * 1e3,
                    flops / tf * 1e-12,
                    to.map_or("-".into(), |t| format!(
                        "{:>9.3} ms ({:>6.2} TFLOP/s, {:.1}x)",
                        t * 1e3,
                        flops / t * 1e-12,
                        t / tf
                    )),
                    e.map_or("-".into(), |e| format!("{e:.1e}"))
                );
            }
            let mut dnew = att.decode(&q, &kc, &vc, &o1)?;
            let mut dold = att.decode_per_head(&q, &kc, &vc, &o2)?;
            for &p in &poss {
                let tn = time(&mut dnew, p, 1, reps.max(5))?;
                let to = time(&mut dold, p, 1, reps.max(5))?;
                let e = reference::nmse(&read(&o1, dq)?, &read(&o2, dq)?);
                println!(
                    "  decode at {p:>5}: split {:>7.2} us, per-head {:>7.2} us ({:.2}x), NMSE {e:.1e}",
                    tn * 1e6,
                    to * 1e6,
                    to / tn
                );
            }
        }
    }
    probe(&dev)?;
    Ok(())
}

/// `VmRSS` and `VmHWM` (MiB) of this process.
fn rss() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn probe(dev: &Arc<Device>) -> Res<()> {
    let mib = env_usize("ATT_PROBE_MIB", 8192);
    if mib == 0 {
        return Ok(());
    }
    let bytes = mib << 20;
    let show = |what: &str| {
        let (r, h) = rss();
        println!("  probe {what:<44} VmRSS {r:>9.1} MiB, VmHWM {h:>9.1} MiB");
    };
    println!("host memory of a {mib} MiB device buffer:");
    show("start");
    // A decode attention reading a whole buffer as its K and V cache (f16, 8 kv heads of 128).
    let s = AttentionShape {
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        kv: KvType::F16,
    };
    let att = Attention::new(dev, s)?;
    let q = dev.upload(&vec![0.01f32; s.q_dim()])?;
    let o = dev.alloc(s.q_dim() * 4)?;
    let read_all = |kc: &Buffer, vc: &Buffer| -> Res<()> {
        let positions = kc.len().min(vc.len()) / (s.kv_dim() * 2);
        let mut d = att.decode(&q, kc, vc, &o)?;
        d.set(positions - 1, 1)?;
        d.enqueue()?;
        dev.finish()?;
        Ok(())
    };
    for device_only in [false, true] {
        let name = if device_only {
            "HOST_NO_ACCESS"
        } else {
            "READ_WRITE"
        };
        let big = if device_only {
            dev.alloc_device_only(bytes)?
        } else {
            dev.alloc(bytes)?
        };
        show(&format!("{name}: created"));
        read_all(&big, &big)?;
        show(&format!("{name}: + a kernel read it all"));
        let parts: Vec<Buffer> = (0..16)
            .map(|i| big.sub(i * (bytes / 16), bytes / 16))
            .collect::<Result<_, _>>()?;
        show(&format!("{name}: + 16 sub-buffers"));
        for p in parts.chunks(2) {
            read_all(&p[0], &p[1])?;
        }
        show(&format!("{name}: + kernels read every sub-buffer"));
        drop((parts, big));
        dev.finish()?;
        show(&format!("{name}: released"));
    }
    Ok(())
}
