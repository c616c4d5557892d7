//! Planning a whole 32-layer model (Llama-3-8B shapes) for every sequence length 1..=4096: as
//! a plan table (what an engine builds) and as whole-model plans at each m.
// criterion_group! expands to an undocumented pub fn.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hetero_partition::{plan_model, plan_op, Phase, PlanTable, Policy};

#[path = "support/phone_soc.rs"]
mod phone_soc;
use phone_soc::{model, model_shapes, profile};

fn bench(c: &mut Criterion) {
    let p = profile().check().expect("valid profile");
    let model = model();
    let shapes = model_shapes();
    c.bench_function("PlanTable prefill, 5 shapes, m = 1..=4096", |b| {
        b.iter(|| {
            let t = PlanTable::build_phase(&p, Phase::Prefill, Policy::Auto, &shapes, 4096)
                .expect("table");
            black_box(t.get(4096, 4096, 4096).map(|p| p.predicted_us()))
        })
    });
    c.bench_function("plan_model 32 layers, m = 1..=4096 (prefill)", |b| {
        b.iter(|| {
            let mut total = 0.0;
            for m in 1..=4096u32 {
                let plan = plan_model(&p, &model, m, Phase::Prefill, Policy::Auto).expect("plan");
                total += plan.predicted_us;
            }
            black_box(total)
        })
    });
    c.bench_function("plan_op 4096x14336, m = 1..=4096", |b| {
        b.iter(|| {
            let mut total = 0.0;
            for m in 1..=4096u32 {
                total += plan_op(&p, 4096, 14336, m).expect("plan").predicted_us();
            }
            black_box(total)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
