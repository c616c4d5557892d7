//! Prints what the planner does with a profile on a Llama-3-8B-shaped model: per phase and
//! row count, the predicted time of `auto` beside each single backend, and each matmul's
//! plan. `cargo run --release -p hetero-partition --example show_plans [PROFILE.json]`
//! (default: the hand-written Snapdragon 8 Gen 3 profile next to this file).

use hetero_partition::{
    plan_model, Backend, ModelDesc, Phase, Placement, Policy, Profile, ProfileError,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = match std::env::args().nth(1) {
        Some(path) => std::fs::read_to_string(path)?,
        None => include_str!("snapdragon-8gen3.json").to_string(),
    };
    let profile = Profile::from_json(&text)?;
    let p = profile.check().map_err(|e: ProfileError| e.to_string())?;
    println!("{}", profile.device);
    let model = ModelDesc::llama(4096, 14336, 32, 8, 128, 32, 128256)?;
    for (phase, m) in [
        (Phase::Decode, 1),
        (Phase::Prefill, 256),
        (Phase::Prefill, 300),
    ] {
        let auto = plan_model(&p, &model, m, phase, Policy::Auto)?;
        print!(
            "{phase} m={m}: auto {:.1} ms ({:.1} tok/s)",
            auto.predicted_us / 1e3,
            m as f64 * 1e6 / auto.predicted_us
        );
        for b in Backend::ALL {
            if let Ok(one) = plan_model(&p, &model, m, phase, Policy::Single(b)) {
                print!(", {b} alone {:.1} ms", one.predicted_us / 1e3);
            }
        }
        println!();
        if let Some(e) = auto.extrapolation() {
            println!("  warning: {e}");
        }
        let matmuls = auto.placements().iter().filter_map(|pl| match pl {
            Placement::MatMul(o) => Some(o),
            _ => None,
        });
        for o in matmuls.chain([&auto.lm_head]) {
            let s = &o.split;
            let who = match s.b {
                Some(b) => format!(
                    "{} rows 0..{} x cols 0..{}, {b} the rest",
                    s.a, s.rows, s.cols
                ),
                None => format!("{} alone", s.a),
            };
            println!(
                "  {:>5} x {:<6} {:<22} {who}: {:.1} us",
                o.k,
                o.n,
                format!("{:?}", o.strategy),
                o.predicted_us()
            );
        }
    }
    Ok(())
}
