//! Times planning a 32-layer model (Llama-3-8B shapes) for every m in 1..=4096, reporting
//! wall-clock and this thread's CPU time per sweep (the machine is shared: CPU time is the
//! figure that does not depend on other people's load). `cargo run --release --example
//! plan_time -p hetero-partition [sweeps]`. Same profile and model as `benches/plan.rs`
//! (both from `benches/support/phone_soc.rs`).

use hetero_partition::{plan_model, Phase, Policy};
use std::time::Instant;

#[path = "../benches/support/phone_soc.rs"]
mod phone_soc;
use phone_soc::{model, profile};

/// CPU time of this thread, from /proc (Linux), in seconds.
fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

fn main() {
    let sweeps: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let p = profile().check().expect("valid profile");
    let model = model();
    let mut sink = 0.0;
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for _ in 0..sweeps {
        let (w0, c0) = (Instant::now(), thread_cpu_s());
        for m in 1..=4096u32 {
            sink += plan_model(&p, &model, m, Phase::Prefill, Policy::Auto)
                .expect("plan")
                .predicted_us;
        }
        walls.push(w0.elapsed().as_secs_f64() * 1e3);
        if let (Some(a), Some(b)) = (c0, thread_cpu_s()) {
            cpus.push((b - a) * 1e3);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "32-layer model, m = 1..=4096, {sweeps} sweeps: median wall {:.2} ms, median thread CPU {:.2} ms (checksum {sink:.3e})",
        median(&mut walls),
        median(&mut cpus)
    );
}
