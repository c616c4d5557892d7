//! Times `Model::load` on a GGUF file: `load_time PATH [REPS] [--no-mmap]` loads it REPS times
//! (default 1) in this process, mapped or (with `--no-mmap`) read into memory, and prints each
//! load's milliseconds and their median. Used to check that load-time validation keeps the
//! real model's load time unchanged.
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: load_time PATH [REPS] [--no-mmap]");
        std::process::exit(2);
    };
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let opts = engine_min::model::LoadOptions {
        mmap: args.next().as_deref() != Some("--no-mmap"),
        memory_limit: None,
    };
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        match engine_min::model::Model::load_with(&path, &opts) {
            Ok(m) => std::hint::black_box(&m),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    println!("loads_ms {ms:.2?} median {:.2}", sorted[reps / 2]);
}
