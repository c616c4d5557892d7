//! Prefill (128-token prompt) and decode (one token at a time after a 64-token context)
//! throughput on the real model. Needs `HETERO_MODEL`; prints a skip line otherwise.
//! Threads: `ENGINE_MIN_THREADS` (default 2); kernel: the best available.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use engine_min::backend::CpuKernel;
use engine_min::engine::{Engine, EngineOptions};
use engine_min::model::Model;
use hetero_sme::ThreadPool;

fn setup() -> Option<(Engine, Vec<u32>)> {
    let Ok(path) = std::env::var("HETERO_MODEL") else {
        eprintln!("SKIP forward bench: HETERO_MODEL is not set");
        return None;
    };
    let threads = std::env::var("ENGINE_MIN_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let model = Arc::new(Model::load(path).expect("model"));
    let text = "The history of the city goes back two thousand years, to a settlement on an \
                island in the river where fishermen traded with merchants from the south. ";
    let mut ids = Vec::new();
    while ids.len() < 128 {
        ids.extend(model.tokenizer.encode(text, false));
    }
    ids.truncate(128);
    let pool = Arc::new(ThreadPool::new(threads).expect("pool"));
    let kernel = CpuKernel::best();
    eprintln!("forward bench: {threads} thread(s), kernel {kernel:?}");
    let exec = engine_min::compose::cpu_executor(&model, pool, kernel, 128).expect("executor");
    let e = Engine::new(
        model,
        exec,
        EngineOptions {
            context: 512,
            ..Default::default()
        },
    )
    .expect("engine");
    Some((e, ids))
}

fn bench(c: &mut Criterion) {
    let Some((mut e, ids)) = setup() else { return };
    let vocab = e.model().config.vocab;
    let mut logits = vec![0f32; vocab];
    let mut g = c.benchmark_group("smollm2-135m-q4_1");
    g.throughput(Throughput::Elements(128));
    g.bench_function("prefill128", |b| {
        b.iter(|| {
            e.reset();
            e.forward(&ids, &mut logits).expect("prefill");
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_at_64", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                if i % 64 == 0 {
                    e.reset();
                    e.forward(&ids[..64], &mut logits).expect("context");
                }
                let t = ids[(i % 64) as usize];
                let t0 = Instant::now();
                e.forward(&[t], &mut logits).expect("decode");
                total += t0.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
