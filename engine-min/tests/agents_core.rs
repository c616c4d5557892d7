//! The scheduling core without the model: workload format and validation, the trace
//! generator, prompt lookup, and the scheduler against a deterministic fake verifier.

use engine_min::agents::draft;
use engine_min::agents::sched::{self, AgentError, BatchRow, Config, SchedOptions, Verifier};
use engine_min::agents::trace::{self, TraceOptions};
use engine_min::agents::workload::{
    AgentSpec, TaskKind, ToolSpec, Workload, WorkloadError, FORMAT_VERSION,
};
use engine_min::batch::BatchError;

/// A fake model: the next token is a hash of the last two tokens of the sequence (vocab 64),
/// so sequences fall into cycles that prompt lookup can draft, sooner or later. Costs are
/// synthetic (10 ms + 1 ms per token per verification, 0.2 ms per prefill token) so schedules
/// are deterministic.
struct Fake {
    seqs: Vec<Vec<u32>>,
    cost: f64,
    prefills: Vec<u32>,
    max_rows: usize,
}

const V: u32 = 64;

fn next(a: u32, b: u32) -> u32 {
    let h = (u64::from(a) * 0x9E37_79B9 + u64::from(b) * 0x85EB_CA6B + 0x1234_5678) >> 7;
    (h % u64::from(V)) as u32
}

impl Fake {
    fn new(n: usize) -> Self {
        Self {
            seqs: vec![Vec::new(); n],
            cost: 0.0,
            prefills: vec![0; n],
            max_rows: 0,
        }
    }
    fn predict(s: &[u32]) -> u32 {
        let n = s.len();
        next(if n >= 2 { s[n - 2] } else { 0 }, s[n - 1])
    }
}

impl Verifier for Fake {
    fn is_stop(&self, token: u32) -> bool {
        token >= V
    }
    fn text(&self, tokens: &[u32]) -> String {
        tokens
            .iter()
            .map(|&t| (b'a' + (t % 26) as u8) as char)
            .collect()
    }
    fn prefill(&mut self, agent: usize, prompt: &[u32]) -> Result<u32, AgentError> {
        self.prefills[agent] += 1;
        self.seqs[agent] = prompt.to_vec();
        self.cost = 2e-4 * prompt.len() as f64;
        Ok(Self::predict(&self.seqs[agent]))
    }
    fn verify(
        &mut self,
        rows: &[BatchRow],
        tokens: &[u32],
        argmax: &mut [u32],
    ) -> Result<(), AgentError> {
        self.max_rows = self.max_rows.max(tokens.len());
        for r in rows {
            for i in 0..r.len {
                let s = &mut self.seqs[r.agent];
                s.push(tokens[r.start + i]);
                argmax[r.start + i] = Self::predict(s);
            }
        }
        self.cost = 0.010 + 0.001 * tokens.len() as f64;
        Ok(())
    }
    fn truncate(&mut self, agent: usize, len: usize) -> Result<(), AgentError> {
        let s = &mut self.seqs[agent];
        if len > s.len() {
            return Err(AgentError::Engine(BatchError::Truncate {
                seq: agent,
                len,
                held: s.len(),
            }));
        }
        s.truncate(len);
        Ok(())
    }
    fn cache_len(&self, agent: usize) -> usize {
        self.seqs[agent].len()
    }
    fn last_cost_s(&self) -> Option<f64> {
        Some(self.cost)
    }
}

fn prompt_tokens(kind: TaskKind, i: usize) -> Vec<u32> {
    match kind {
        // Repetitive prompts: lookup finds matches at once.
        TaskKind::Code | TaskKind::Tool => (0..40).map(|j| ((j % 7) * 3 + i) as u32 % V).collect(),
        TaskKind::Reasoning => (0..40).map(|j| ((j * 13 + i * 5) % 61) as u32).collect(),
    }
}

fn workload(n: usize, tool_ms: (f64, f64)) -> (Workload, Vec<Vec<u32>>) {
    let kinds = [
        TaskKind::Tool,
        TaskKind::Code,
        TaskKind::Reasoning,
        TaskKind::Tool,
    ];
    let agents: Vec<AgentSpec> = (0..n)
        .map(|i| {
            let kind = kinds[i % kinds.len()];
            let tool = kind == TaskKind::Tool;
            AgentSpec {
                name: format!("a{i}"),
                kind,
                prompt: "unused by the fake".into(),
                arrival_s: 0.05 * i as f64,
                max_tokens: 80,
                // 'k' is tokens 10, 36 and 62: a few markers per output.
                tool_markers: if tool { vec!["k".into()] } else { vec![] },
                tool: tool.then_some(ToolSpec {
                    min_ms: tool_ms.0,
                    max_ms: tool_ms.1,
                    max_calls: 2,
                }),
            }
        })
        .collect();
    let prompts = agents
        .iter()
        .enumerate()
        .map(|(i, a)| prompt_tokens(a.kind, i))
        .collect();
    (
        Workload {
            version: FORMAT_VERSION,
            seed: 42,
            agents,
        },
        prompts,
    )
}

#[test]
fn every_config_is_lossless_and_respects_slots() {
    for n in 1..=6 {
        let (w, prompts) = workload(n, (50.0, 400.0));
        let mut f = Fake::new(n);
        let reference = sched::greedy_reference(&w, &prompts, &mut f).unwrap();
        let opts = SchedOptions::default();
        for c in Config::ALL {
            let mut f = Fake::new(n);
            let r = sched::run(&w, &prompts, c, &opts, &mut f).unwrap();
            for (i, (a, want)) in r.agents.iter().zip(&reference).enumerate() {
                assert_eq!(&a.tokens, want, "{} n={n} agent {i}", c.name());
                assert_eq!(
                    a.prefills,
                    1,
                    "{} agent {i}: one prefill, resumes do not re-prefill",
                    c.name()
                );
                assert_eq!(f.prefills[i], 1);
            }
            assert!(
                r.max_slots <= 16 && f.max_rows <= 16,
                "{}: {} slots",
                c.name(),
                r.max_slots
            );
            match c {
                Config::BatchAr => assert_eq!(r.max_slots as usize, n.min(8)),
                Config::Hal | Config::HalSy => {
                    assert!(
                        r.min_budget >= opts.budget.l_min,
                        "{}: budget {}",
                        c.name(),
                        r.min_budget
                    )
                }
                Config::BatchSd => assert_eq!(r.min_budget, 16 / n.min(8) as u32),
            }
            let tools: u32 = r.agents.iter().map(|a| a.tool_calls).sum();
            if n >= 1 {
                assert!(tools > 0, "{}: the tool agents made no call", c.name());
            }
            // Every agent that stalled came back from its frozen cache (checked inside `run`).
            let resumes: u32 = r.agents.iter().map(|a| a.resumes).sum();
            assert_eq!(resumes, tools, "{}", c.name());
        }
    }
}

#[test]
fn suspend_and_yield_hides_long_stalls_and_drafts_pay() {
    let (w, prompts) = workload(4, (2000.0, 4000.0));
    let opts = SchedOptions::default();
    let run = |c| sched::run(&w, &prompts, c, &opts, &mut Fake::new(4)).unwrap();
    let (ar, sd, hal, sy) = (
        run(Config::BatchAr),
        run(Config::BatchSd),
        run(Config::Hal),
        run(Config::HalSy),
    );
    // Without suspend-and-yield the whole batch waits on every tool.
    assert!(sd.blocked_s > 1.0 && hal.blocked_s > 1.0 && ar.blocked_s > 1.0);
    assert_eq!(sy.blocked_s, 0.0);
    assert!(
        sy.makespan_s < hal.makespan_s,
        "{} vs {}",
        sy.makespan_s,
        hal.makespan_s
    );
    // Speculation takes fewer steps than one token per step.
    assert!(sd.steps < ar.steps && hal.steps < ar.steps);
    assert!(hal.tokens_per_agent_step() > 1.0);
}

#[test]
fn workload_json_round_trips_and_generator_replays() {
    let o = TraceOptions {
        seed: 7,
        agents: 5,
        ..TraceOptions::default()
    };
    let w = trace::generate(&o).unwrap();
    assert_eq!(w, trace::generate(&o).unwrap(), "same seed, same trace");
    assert_eq!(w.to_json(), trace::generate(&o).unwrap().to_json());
    let other = trace::generate(&TraceOptions { seed: 8, ..o }).unwrap();
    assert_ne!(w, other);
    let dir = std::env::temp_dir().join(format!("agents-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.json");
    w.write(&p).unwrap();
    let back = Workload::read(&p).unwrap();
    assert_eq!(back, w);
    assert_eq!(std::fs::read_to_string(&p).unwrap(), back.to_json());
    std::fs::remove_dir_all(&dir).ok();
    // Arrivals: first at 0, non-decreasing.
    assert_eq!(w.agents[0].arrival_s, 0.0);
    assert!(w
        .agents
        .windows(2)
        .all(|p| p[0].arrival_s <= p[1].arrival_s));
    // Tool durations replay and stay in range.
    for (i, a) in w.agents.iter().enumerate() {
        if let Some(t) = a.tool {
            for call in 0..t.max_calls {
                let d = w.tool_duration_s(i, call).unwrap();
                assert_eq!(Some(d), w.tool_duration_s(i, call));
                assert!(
                    d * 1e3 >= t.min_ms * 0.999 && d * 1e3 <= t.max_ms * 1.001,
                    "{d}"
                );
            }
            assert_eq!(w.tool_duration_s(i, t.max_calls), None);
        } else {
            assert_eq!(w.tool_duration_s(i, 0), None);
        }
    }
}

#[test]
fn generator_follows_the_mix() {
    let w = trace::generate(&TraceOptions {
        seed: 3,
        agents: 32,
        mean_interarrival_s: 0.0,
        ..TraceOptions::default()
    })
    .unwrap();
    assert!(w.agents.iter().all(|a| a.arrival_s == 0.0));
    let count = |k| w.agents.iter().filter(|a| a.kind == k).count();
    let (r, c, t) = (
        count(TaskKind::Reasoning),
        count(TaskKind::Code),
        count(TaskKind::Tool),
    );
    assert_eq!(r + c + t, 32);
    // Expected 6.4 : 12.8 : 12.8; a binomial spread of 3 sigma is about +-7.
    assert!(r <= 14 && c >= 5 && t >= 5, "{r}:{c}:{t}");
    let only_code = trace::generate(&TraceOptions {
        mix: [0, 1, 0],
        ..TraceOptions::default()
    })
    .unwrap();
    assert!(only_code.agents.iter().all(|a| a.kind == TaskKind::Code));
    assert!(trace::parse_mix("1:2:2").is_ok());
    for bad in ["1:2", "a:b:c", "0:0:0", "1:2:3:4", ""] {
        assert!(trace::parse_mix(bad).is_err(), "{bad}");
    }
    assert!(trace::generate(&TraceOptions {
        agents: 0,
        ..TraceOptions::default()
    })
    .is_err());
}

fn one_agent_json(agent_fields: &str) -> String {
    format!(r#"{{"version": 1, "seed": 1, "agents": [{{{agent_fields}}}]}}"#)
}

#[test]
fn bad_workloads_are_refused_with_clear_errors() {
    let base = r#""name": "x", "kind": "tool", "prompt": "hi", "arrival_s": 0.5, "max_tokens": 8, "tool_markers": ["END"], "tool": {"min_ms": 10, "max_ms": 100, "max_calls": 1}"#;
    assert!(Workload::from_json(&one_agent_json(base)).is_ok());
    let cases: &[(&str, &str)] = &[
        ("{not json", "malformed"),
        (r#"{"version": 1, "seed": 1}"#, "malformed"),
        (
            &one_agent_json(&base.replace("\"tool\",", "\"poetry\",")),
            "malformed",
        ),
        (
            &one_agent_json(&format!("{base}, \"extra\": 1")),
            "malformed",
        ),
        (
            &one_agent_json(&base.replace("\"min_ms\": 10", "\"min_ms\": -5")),
            "negative",
        ),
        (
            &one_agent_json(&base.replace("\"max_ms\": 100", "\"max_ms\": 1e9")),
            "absurd",
        ),
        (
            &one_agent_json(&base.replace("\"max_ms\": 100", "\"max_ms\": 5")),
            "below min_ms",
        ),
        (
            &one_agent_json(&base.replace("\"min_ms\": 10", "\"min_ms\": 0")),
            "must be > 0",
        ),
        (
            &one_agent_json(&base.replace("\"arrival_s\": 0.5", "\"arrival_s\": -1")),
            "arrival_s",
        ),
        (
            &one_agent_json(&base.replace("\"max_tokens\": 8", "\"max_tokens\": 0")),
            "max_tokens",
        ),
        (
            &one_agent_json(&base.replace("\"prompt\": \"hi\"", "\"prompt\": \"\"")),
            "prompt",
        ),
        (
            &one_agent_json(&base.replace("[\"END\"]", "[\"\"]")),
            "empty marker",
        ),
        (
            &one_agent_json(&base.replace(
                r#", "tool": {"min_ms": 10, "max_ms": 100, "max_calls": 1}"#,
                "",
            )),
            "required",
        ),
        (r#"{"version": 2, "seed": 1, "agents": []}"#, "version 2"),
        (
            r#"{"version": 1, "seed": 1, "agents": []}"#,
            "1 to 32 agents",
        ),
    ];
    for (text, want) in cases {
        let e = Workload::from_json(text).expect_err(text);
        let msg = e.to_string();
        assert!(msg.contains(want), "{text}\n  -> {msg}\n  wanted `{want}`");
    }
    // Prompt too long for the context (checked once the prompt is encoded).
    let w = Workload::from_json(&one_agent_json(base)).unwrap();
    assert!(w.check_context(&[100], 1024, 16).is_ok());
    let e = w.check_context(&[1010], 1024, 16).unwrap_err();
    assert!(
        matches!(
            e,
            WorkloadError::PromptTooLong {
                prompt_tokens: 1010,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("exceeds"));
    assert!(w.check_context(&[0], 1024, 16).is_err());
}

#[test]
fn prompt_lookup_proposes_the_continuation_of_the_latest_match() {
    let mut out = [0u32; 8];
    // Suffix [1, 2, 3] occurred at 0: propose what followed (4, 5, 1, 2, 3).
    let ctx = [1, 2, 3, 4, 5, 1, 2, 3];
    let k = draft::lookup(&ctx, &mut out);
    assert_eq!(&out[..k], &[4, 5, 1, 2, 3]);
    // Budget caps the draft.
    let k = draft::lookup(&ctx, &mut out[..2]);
    assert_eq!(&out[..k], &[4, 5]);
    // Latest occurrence wins: 9 followed the later [7].
    let k = draft::lookup(&[7, 8, 7, 9, 7], &mut out);
    assert_eq!(&out[..k], &[9, 7]);
    // No match, empty context, no room.
    assert_eq!(draft::lookup(&[1, 2, 3], &mut out), 0);
    assert_eq!(draft::lookup(&[], &mut out), 0);
    assert_eq!(draft::lookup(&ctx, &mut []), 0);
    // Longer suffixes are preferred over shorter ones.
    let k = draft::lookup(&[5, 6, 1, 6, 9, 5, 6], &mut out);
    assert_eq!(&out[..k], &[1, 6, 9, 5, 6]);
}

#[test]
fn admission_cap_queues_agents_and_stays_lossless() {
    // L_min 4: at most 4 agents in the batch; 6 arrive, the tool agents stall long, so the
    // scheduler must idle with a full batch and admit the others as agents finish.
    let (w, prompts) = workload(6, (3000.0, 5000.0));
    let mut opts = SchedOptions::default();
    opts.budget.l_min = 4;
    let reference = sched::greedy_reference(&w, &prompts, &mut Fake::new(6)).unwrap();
    for c in Config::ALL {
        let mut f = Fake::new(6);
        let r = sched::run(&w, &prompts, c, &opts, &mut f).unwrap();
        for (a, want) in r.agents.iter().zip(&reference) {
            assert_eq!(&a.tokens, want, "{}", c.name());
        }
        assert!(r.max_slots <= 16);
        if c != Config::BatchAr {
            assert!(r.min_budget >= 4, "{}: {}", c.name(), r.min_budget);
        } else {
            assert!(r.max_slots <= 4, "at most 4 agents at once");
        }
    }
}

#[test]
fn cli_generates_replayable_traces_and_refuses_bad_files_before_loading_a_model() {
    let cli = |args: Vec<String>| {
        let mut sink = Vec::new();
        engine_min::cli::run_with(
            ["engine-min".to_string(), "agents".to_string()]
                .into_iter()
                .chain(args),
            &mut sink,
        )
        .map_err(|e| e.to_string())
    };
    let dir = std::env::temp_dir().join(format!("agents-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("t.json");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let o = out.to_str().unwrap();
    cli(s(&[
        "gen-trace",
        "--seed",
        "5",
        "--agents",
        "3",
        "--out",
        o,
        "--mix",
        "1:2:2",
    ]))
    .unwrap();
    let first = std::fs::read_to_string(&out).unwrap();
    cli(s(&[
        "gen-trace",
        "--seed",
        "5",
        "--agents",
        "3",
        "--out",
        o,
    ]))
    .unwrap();
    assert_eq!(
        first,
        std::fs::read_to_string(&out).unwrap(),
        "same seed, same file"
    );
    assert!(cli(s(&[
        "gen-trace",
        "--seed",
        "5",
        "--agents",
        "0",
        "--out",
        o
    ]))
    .is_err());
    assert!(
        cli(s(&["gen-trace", "--agents", "2", "--out", o])).is_err(),
        "seed is required"
    );
    assert!(cli(s(&[
        "gen-trace",
        "--seed",
        "1",
        "--out",
        o,
        "--mix",
        "1:x:2"
    ]))
    .is_err());
    // A bad workload is refused before any model is touched (the model path does not exist).
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        first.replacen("\"min_ms\": 200.0", "\"min_ms\": -200.0", 1),
    )
    .unwrap();
    let e = cli(s(&[
        "run",
        "--workload",
        bad.to_str().unwrap(),
        "--model",
        "/nonexistent.gguf",
    ]))
    .unwrap_err();
    assert!(e.contains("negative") || e.contains("tool"), "{e}");
    std::fs::write(&bad, "{\"version\": 1").unwrap();
    let e = cli(s(&[
        "run",
        "--workload",
        bad.to_str().unwrap(),
        "--model",
        "/x",
    ]))
    .unwrap_err();
    assert!(e.contains("malformed"), "{e}");
    let e = cli(s(&[
        "run",
        "--workload",
        o,
        "--config",
        "nope",
        "--model",
        "/x",
    ]))
    .unwrap_err();
    assert!(e.contains("unknown config"), "{e}");
    assert!(cli(s(&["frobnicate"])).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tool_calls_follow_marker_occurrences_across_token_boundaries() {
    // Two-character markers span two tokens of the fake (one character each): every
    // non-overlapping occurrence in the greedy text starts a call, up to `max_calls`.
    let (mut w, prompts) = workload(4, (50.0, 100.0));
    let reference = sched::greedy_reference(&w, &prompts, &mut Fake::new(4)).unwrap();
    let f = Fake::new(4);
    for (a, out) in w.agents.iter_mut().zip(&reference) {
        let text = f.text(out);
        // The most frequent adjacent pair in this agent's text.
        let b = text.as_bytes();
        let best = (0..b.len().saturating_sub(1))
            .map(|i| &text[i..i + 2])
            .max_by_key(|p| text.matches(*p).count())
            .unwrap_or("zz")
            .to_string();
        a.tool_markers = vec![best];
        a.tool = Some(ToolSpec {
            min_ms: 50.0,
            max_ms: 100.0,
            max_calls: 100,
        });
    }
    for c in [Config::HalSy, Config::BatchSd] {
        let r = sched::run(&w, &prompts, c, &SchedOptions::default(), &mut Fake::new(4)).unwrap();
        for (i, (a, out)) in r.agents.iter().zip(&reference).enumerate() {
            assert_eq!(&a.tokens, out);
            let m = &w.agents[i].tool_markers[0];
            let text = f.text(out);
            // A marker completed by the very last token ends the agent instead of a call.
            let mut want = text.matches(m.as_str()).count() as u32;
            if text.ends_with(m.as_str()) {
                want -= 1;
            }
            assert_eq!(
                a.tool_calls,
                want,
                "{} agent {i} marker {m:?} in {text:?}",
                c.name()
            );
        }
    }
}
