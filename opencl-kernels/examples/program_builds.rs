//! What the resident decoder's OpenCL programs cost the device's compiler on a cold start
//! (issue 33: the first run of the decoder on a machine spends most of its start-up here).
//! Builds, with the binary cache off, each program the decoder builds for a Llama-8B Q4_0 model
//! (Q6_K head, Q8_0 embedding, f16 KV cache): the decoder's ops, the attention kernels, and
//! the fast matmuls per weight format (also without their GEMMs, `-DMM_NO_GEMM`); first one
//! after another, then the decoder's three side by side, to see whether the compiler runs
//! them at once (an 8B Q4_0 file needs the ops, attention, Q4_0 and Q6_K matmuls).
//!
//! Environment: the crate's (`HETERO_OPENCL_LIB`, `HETERO_OPENCL_PLATFORM`, ...);
//! `HETERO_OPENCL_CACHE` is forced `off` here.

use hetero_opencl_kernels::decoder::{DECODER_SOURCE, MM_SOURCE};
use hetero_opencl_kernels::{caps, Attention, AttentionShape, Device, KvType, OPTIONS};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// kv.cl's code of an f16 cache, and mm.cl's MM_FMT codes: Q4_0 T, Q6_K split, Q8_0 split.
const KV_F16: u32 = 1;
const FORMATS: [(&str, u32); 3] = [("Q4_0 (T)", 1), ("Q6_K (split)", 8), ("Q8_0 (split)", 3)];
const SHAPE: AttentionShape = AttentionShape {
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
    kv: KvType::F16,
};

fn timed<T>(f: impl FnOnce() -> Res<T>) -> Res<Duration> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

fn main() -> Res<()> {
    std::env::set_var("HETERO_OPENCL_CACHE", "off");
    let dev = Device::from_env()?;
    println!("device: {} / {}", dev.info().platform_name, dev.info().name);
    let t = Instant::now();
    let dot = u32::from(caps::int_dot(&dev).0 == caps::IntDot::Dp4aPtx);
    println!(
        "RESULT build {:<34} {:>7.3} s",
        "int8 dot probe (caps::int_dot)",
        t.elapsed().as_secs_f64()
    );
    let ops = |d: &Arc<Device>| -> Res<()> {
        d.build(DECODER_SOURCE, &format!("{OPTIONS} -DKV_TYPE={KV_F16}"))?;
        Ok(())
    };
    let attn = |d: &Arc<Device>| -> Res<()> {
        Attention::new(d, SHAPE)?;
        Ok(())
    };
    let mm = |d: &Arc<Device>, code: u32, extra: &str| -> Res<()> {
        let o = format!("{OPTIONS} -DMM_FMT={code} -DMM_DOT={dot} -DKV_TYPE={KV_F16} {extra}");
        d.build(MM_SOURCE, &o)?;
        Ok(())
    };
    let mut serial = Duration::ZERO;
    let mut show = |what: &str, t: Duration| {
        serial += t;
        println!("RESULT build {what:<34} {:>7.3} s", t.as_secs_f64());
    };
    show("decoder ops (decoder.cl)", timed(|| ops(&dev))?);
    show("attention (attention.cl)", timed(|| attn(&dev))?);
    for (name, code) in FORMATS {
        show(&format!("matmuls {name}"), timed(|| mm(&dev, code, ""))?);
        show(
            &format!("matmuls {name}, GEMVs only"),
            timed(|| mm(&dev, code, "-DMM_NO_GEMM"))?,
        );
    }
    println!(
        "RESULT one after another: {:.3} s in all",
        serial.as_secs_f64()
    );
    // The decoder's set side by side: ops, attention and the three formats' matmuls.
    let t = Instant::now();
    let errs: Vec<String> = std::thread::scope(|s| {
        let mut jobs = vec![s.spawn(|| ops(&dev).map_err(|e| e.to_string()))];
        jobs.push(s.spawn(|| attn(&dev).map_err(|e| e.to_string())));
        // An 8B Q4_0 file's matmuls: Q4_0 layers, the Q6_K head.
        for (_, code) in &FORMATS[..2] {
            let (d, code) = (&dev, *code);
            jobs.push(s.spawn(move || mm(d, code, "").map_err(|e| e.to_string())));
        }
        jobs.into_iter()
            .filter_map(|j| j.join().ok().and_then(|r| r.err()))
            .collect()
    });
    if let Some(e) = errs.first() {
        return Err(e.clone().into());
    }
    println!(
        "RESULT the decoder's four programs side by side: {:.3} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
