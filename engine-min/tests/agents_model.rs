//! The agents scheduler on the real model (`HETERO_MODEL`): batch invariance of the batched
//! forward, losslessness of every configuration, slot limits, and resume without re-prefill.

use std::sync::Arc;

use engine_min::agents::model::ModelVerifier;
use engine_min::agents::sched::{self, Config, SchedOptions, Verifier};
use engine_min::agents::trace::{self, TraceOptions};
use engine_min::agents::workload::{TaskKind, ToolSpec};
use engine_min::backend::CpuKernel;
use engine_min::batch::{BatchEngine, BatchOptions, Logits, SeqTokens};
use engine_min::compose::cpu_executor;
use engine_min::engine::{Engine, EngineOptions};
use engine_min::model::Model;
use hetero_sme::ThreadPool;

fn model() -> Option<Arc<Model>> {
    let probe = std::env::var("HETERO_MODEL")
        .map_err(|_| "HETERO_MODEL is not set".to_string())
        .and_then(|p| Model::load(&p).map_err(|e| format!("{p}: {e}")));
    hetero_tests::require("model", probe).map(Arc::new)
}

/// A sequence's logits do not depend on what it is batched with (bit for bit), for every CPU
/// kernel, and agree with the single-sequence engine.
#[test]
fn batched_rows_are_batch_invariant() {
    let Some(m) = model() else { return };
    let vocab = m.config.vocab;
    let tok = &m.tokenizer;
    let a = tok.encode_prompt("The capital of France is");
    let b = tok.encode_prompt("def add(a, b):\n    return a + b\n\ndef mul(a, b):");
    let pool = Arc::new(ThreadPool::new(2).expect("pool"));
    for kernel in CpuKernel::available() {
        let exec = cpu_executor(&m, Arc::clone(&pool), kernel, 64).unwrap();
        let opts = BatchOptions {
            context: 128,
            sequences: 3,
            kv: Default::default(),
        };
        let mut e = BatchEngine::new(Arc::clone(&m), exec, opts).unwrap();
        let mut last = vec![f32::NAN; 2 * vocab];
        // Prefill a in seq 0 alone, a in seq 1 batched with b in seq 2.
        e.forward(
            &[SeqTokens { seq: 0, tokens: &a }],
            Logits::Last,
            &mut last[..vocab],
        )
        .unwrap();
        let alone = last[..vocab].to_vec();
        last.fill(f32::NAN);
        e.forward(
            &[
                SeqTokens { seq: 2, tokens: &b },
                SeqTokens { seq: 1, tokens: &a },
            ],
            Logits::Last,
            &mut last,
        )
        .unwrap();
        assert_eq!(
            &last[vocab..],
            &alone[..],
            "{kernel:?}: prefill row changed by batching"
        );
        // Verification-shaped batches: 5 tokens for seq 0 alone vs with 3 tokens of seq 2.
        let draft = [11u32, 22, 33, 44, 55];
        let mut all = vec![f32::NAN; 8 * vocab];
        e.forward(
            &[SeqTokens {
                seq: 0,
                tokens: &draft,
            }],
            Logits::All,
            &mut all[..5 * vocab],
        )
        .unwrap();
        let alone = all[..5 * vocab].to_vec();
        all.fill(f32::NAN);
        e.forward(
            &[
                SeqTokens {
                    seq: 2,
                    tokens: &draft[..3],
                },
                SeqTokens {
                    seq: 1,
                    tokens: &draft,
                },
            ],
            Logits::All,
            &mut all,
        )
        .unwrap();
        assert_eq!(
            &all[3 * vocab..],
            &alone[..],
            "{kernel:?}: verify rows changed by batching"
        );
        // Rollback then re-append gives the same logits again.
        e.truncate(0, a.len() + 2).unwrap();
        let mut one = vec![f32::NAN; 3 * vocab];
        e.forward(
            &[SeqTokens {
                seq: 0,
                tokens: &draft[2..],
            }],
            Logits::All,
            &mut one,
        )
        .unwrap();
        assert_eq!(&one[..], &alone[2 * vocab..], "{kernel:?}: after truncate");

        // Against the one-sequence engine (same kernels, same math): 1e-3 absolute is the
        // engine's own tolerance against the f64 reference; the two paths differ only in
        // loop structure, so they agree far closer in practice.
        let exec = cpu_executor(&m, Arc::clone(&pool), kernel, 64).unwrap();
        let mut eng = Engine::new(
            Arc::clone(&m),
            exec,
            EngineOptions {
                context: 128,
                ..Default::default()
            },
        )
        .unwrap();
        let mut want = vec![f32::NAN; vocab];
        eng.forward(&a, &mut want).unwrap();
        let mut got = vec![f32::NAN; vocab];
        e.truncate(0, 0).unwrap();
        e.forward(&[SeqTokens { seq: 0, tokens: &a }], Logits::Last, &mut got)
            .unwrap();
        let diff = want
            .iter()
            .zip(&got)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            diff <= 1e-3,
            "{kernel:?}: batch engine vs engine differ by {diff}"
        );
    }
    // Bad input is an error, not a panic.
    let exec = cpu_executor(&m, Arc::clone(&pool), CpuKernel::best(), 8).unwrap();
    let opts = BatchOptions {
        context: 16,
        sequences: 1,
        kv: Default::default(),
    };
    let mut e = BatchEngine::new(Arc::clone(&m), exec, opts).unwrap();
    let mut l = vec![0f32; vocab];
    assert!(e
        .forward(
            &[SeqTokens {
                seq: 1,
                tokens: &[1]
            }],
            Logits::Last,
            &mut l
        )
        .is_err());
    assert!(e
        .forward(
            &[SeqTokens {
                seq: 0,
                tokens: &[u32::MAX]
            }],
            Logits::Last,
            &mut l
        )
        .is_err());
    assert!(e
        .forward(
            &[SeqTokens {
                seq: 0,
                tokens: &[1; 9]
            }],
            Logits::Last,
            &mut l
        )
        .is_err());
    assert!(e
        .forward(
            &[SeqTokens {
                seq: 0,
                tokens: &[1]
            }],
            Logits::Last,
            &mut l[1..]
        )
        .is_err());
    assert!(e.truncate(0, 1).is_err());
}

/// Every configuration reproduces each agent's non-speculative greedy text exactly, uses at
/// most 16 slots per step, gives no agent in the batch fewer than L_min slots (HAL), prefills
/// each agent once and resumes stalled agents from their frozen caches.
#[test]
fn every_configuration_is_lossless_on_the_model() {
    let Some(m) = model() else { return };
    // A small seeded trace: a tool agent (it writes its marker within ~25 tokens) and a
    // code agent, arriving together; short generations keep the test well under a minute.
    let mut w = trace::generate(&TraceOptions {
        seed: 11,
        agents: 2,
        mix: [0, 1, 1],
        mean_interarrival_s: 0.05,
        max_tokens: 32,
        tool: ToolSpec {
            min_ms: 300.0,
            max_ms: 900.0,
            max_calls: 1,
        },
    })
    .unwrap();
    // Make sure both kinds are there whatever the draw.
    let pick = |k: TaskKind, i: usize| {
        trace::generate(&TraceOptions {
            seed: 11 + i as u64,
            agents: 1,
            mix: if k == TaskKind::Tool {
                [0, 0, 1]
            } else {
                [0, 1, 0]
            },
            max_tokens: 32,
            tool: ToolSpec {
                min_ms: 300.0,
                max_ms: 900.0,
                max_calls: 1,
            },
            ..TraceOptions::default()
        })
        .unwrap()
        .agents
        .remove(0)
    };
    w.agents[0] = pick(TaskKind::Tool, 0);
    w.agents[1] = pick(TaskKind::Code, 1);
    w.agents[1].arrival_s = 0.05;
    w.agents[1].max_tokens = 24;
    w.validate().unwrap();
    let opts = SchedOptions::default();
    let prompts = engine_min::agents::encode(&w, &m, 512, 16).unwrap();
    let mut v = ModelVerifier::new(Arc::clone(&m), w.agents.len(), 512, 2, 16).unwrap();
    let reference = sched::greedy_reference(&w, &prompts, &mut v).unwrap();
    let text0 = v.text(&reference[0]);
    assert!(
        text0.contains("</tool_call>"),
        "the tool agent should call a tool: {text0:?}"
    );
    for c in Config::ALL {
        let before = v.prefill_calls();
        let r = sched::run(&w, &prompts, c, &opts, &mut v).unwrap();
        for (i, (a, want)) in r.agents.iter().zip(&reference).enumerate() {
            assert_eq!(
                &a.tokens,
                want,
                "{}: agent {i}: {:?} vs greedy {:?}",
                c.name(),
                v.text(&a.tokens),
                v.text(want)
            );
            assert_eq!(a.prefills, 1, "{}", c.name());
        }
        assert_eq!(
            v.prefill_calls() - before,
            w.agents.len() as u64,
            "{}",
            c.name()
        );
        assert!(r.max_slots <= 16, "{}: {} slots", c.name(), r.max_slots);
        if matches!(c, Config::Hal | Config::HalSy) {
            assert!(r.min_budget >= opts.budget.l_min, "{}", c.name());
        }
        let tool = &r.agents[0];
        assert_eq!(tool.tool_calls, 1, "{}", c.name());
        // Resumed from the frozen cache (`run` checks the cache length on resume) without a
        // second prefill.
        assert_eq!(tool.resumes, 1, "{}", c.name());
        if c == Config::HalSy {
            assert_eq!(r.blocked_s, 0.0, "suspend-and-yield never blocks the batch");
        }
        if c != Config::BatchAr {
            assert!(r.acceptance() > 0.0, "{}: no draft accepted", c.name());
        }
    }
    // The model clock: calibrated per-row-count costs make a schedule replay exactly.
    let t = v.calibrate(16, 64, 1).unwrap();
    assert_eq!(t.len(), 16);
    assert!(t.iter().all(|&c| c > 0.0 && c.is_finite()), "{t:?}");
    let a = sched::run(&w, &prompts, Config::HalSy, &opts, &mut v).unwrap();
    let b = sched::run(&w, &prompts, Config::HalSy, &opts, &mut v).unwrap();
    assert_eq!(a, b, "model clock: the same schedule and times twice");
    for (x, want) in a.agents.iter().zip(&reference) {
        assert_eq!(&x.tokens, want);
    }
}
