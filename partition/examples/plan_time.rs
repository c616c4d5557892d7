//! Times planning a 32-layer model (Llama-3-8B shapes) for every m in 1..=4096: a prefill
//! `PlanTable` of its matmul shapes (q/o, k/v, gate/up, down, LM head), and `plan_model` at
//! each m. Reports wall-clock and this thread's CPU time per sweep (the machine is shared: CPU
//! time is the figure that does not depend on other people's load), medians over the sweeps.
//! `cargo run --release --example plan_time -p hetero-partition [sweeps]`. Same profile and
//! model as `benches/plan.rs` (both from `benches/support/phone_soc.rs`).

use hetero_partition::{plan_model, Phase, PlanTable, Policy};
use std::time::Instant;

#[path = "../benches/support/phone_soc.rs"]
mod phone_soc;
use phone_soc::{model, model_shapes, profile};

/// CPU time of this thread, from /proc (Linux), in seconds.
fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs `f` `sweeps` times; returns the median wall and thread-CPU milliseconds.
fn time(sweeps: u32, mut f: impl FnMut() -> f64) -> (f64, f64, f64) {
    let (mut walls, mut cpus, mut sink) = (Vec::new(), Vec::new(), 0.0);
    for _ in 0..sweeps {
        let (w0, c0) = (Instant::now(), thread_cpu_s());
        sink += f();
        walls.push(w0.elapsed().as_secs_f64() * 1e3);
        if let (Some(a), Some(b)) = (c0, thread_cpu_s()) {
            cpus.push((b - a) * 1e3);
        }
    }
    (median(&mut walls), median(&mut cpus), sink)
}

fn main() {
    let sweeps: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let p = profile().check().expect("valid profile");
    let model = model();
    let shapes = model_shapes();
    for phase in [Phase::Prefill, Phase::Decode] {
        let (wall, cpu, sink) = time(sweeps, || {
            let t = PlanTable::build_phase(&p, phase, Policy::Auto, &shapes, 4096).expect("table");
            t.get(4096, 4096, 4096).expect("plan").predicted_us()
        });
        println!(
            "PlanTable::build_phase({phase}), {} shapes x m = 1..=4096, {sweeps} sweeps: median wall {wall:.2} ms, median thread CPU {cpu:.2} ms (checksum {sink:.3e})",
            shapes.len()
        );
    }
    let (wall, cpu, sink) = time(sweeps, || {
        (1..=4096u32)
            .map(|m| {
                plan_model(&p, &model, m, Phase::Prefill, Policy::Auto)
                    .expect("plan")
                    .predicted_us
            })
            .sum()
    });
    println!(
        "plan_model 32 layers at each m = 1..=4096 (prefill), {sweeps} sweeps: median wall {wall:.2} ms, median thread CPU {cpu:.2} ms (checksum {sink:.3e})"
    );
}
