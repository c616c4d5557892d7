//! What `engine-min plan` prints: the model's matmul shapes by name and one line per plan.
//! The measuring is [`crate::profiler`]'s, the deciding [`crate::auto`]'s.

use hetero_partition::{ErrorStats, OpPlan, Phase, Prediction};

use crate::model::Config;

/// The model's distinct matmul shapes: (name, k = reduction, n = output columns).
pub fn model_shapes(c: &Config) -> Vec<(&'static str, u32, u32)> {
    let (d, kv, ff) = (c.d_model as u32, c.kv_dim() as u32, c.d_ff as u32);
    vec![
        ("attn_q / attn_output", d, d),
        ("attn_k / attn_v", d, kv),
        ("ffn_gate / ffn_up", d, ff),
        ("ffn_down", ff, d),
        ("output", d, c.vocab as u32),
    ]
}

/// One line describing a plan: strategy, split and predicted time.
pub fn describe(p: &OpPlan) -> String {
    let s = &p.split;
    let split = match s.b {
        Some(b) => format!(
            "{} takes rows 0..{} x cols 0..{}, {} the rest",
            s.a, s.rows, s.cols, b
        ),
        None => format!("{} takes all {} x {}", s.a, p.m, p.n),
    };
    let npu = s
        .npu
        .as_ref()
        .map(|e| format!(", npu exec {e:?}"))
        .unwrap_or_default();
    format!(
        "k={} n={} m={}: {:?}; {split}{npu}; predicted {:.1} us (a {:.1}, b {:.1}, sync {:.1}, copy {:.1})",
        p.k, p.n, p.m, p.strategy, p.cost.total_us, p.cost.a_us, p.cost.b_us, p.cost.sync_us,
        p.cost.copy_us
    )
}

/// The name of the model's matmul shape `(k, n)` (`k x n` for another shape).
pub fn shape_name(c: &Config, k: u32, n: u32) -> String {
    model_shapes(c)
        .into_iter()
        .find(|s| (s.1, s.2) == (k, n))
        .map_or_else(|| format!("{k}x{n}"), |s| s.0.to_string())
}

/// Sums the predictions of several measuring windows (a run's prefill and its decode) by op
/// class and phase: a class appears once per phase whose curve planned it, whichever window
/// ran it (the prefill's one-row LM head is planned by the decode curves, so it counts there).
pub fn merge_predictions(windows: &[&[Prediction]]) -> Vec<Prediction> {
    let mut v: Vec<Prediction> = Vec::new();
    for p in windows.iter().flat_map(|w| w.iter()) {
        match v
            .iter_mut()
            .find(|q| (q.k, q.n, q.phase) == (p.k, p.n, p.phase))
        {
            Some(q) => {
                q.calls += p.calls;
                q.predicted_us += p.predicted_us;
                q.measured_us += p.measured_us;
            }
            None => v.push(*p),
        }
    }
    v
}

/// Whether the plans that ran a class predicted a time for it: a plan from a table built
/// without measured curves (a forced plan's placeholder costs) predicts nothing, and a class
/// without a prediction is not an error of -100%.
pub fn is_predicted(p: &Prediction) -> bool {
    p.predicted_us > 0.0
}

/// The [`ErrorStats`] of the predicted classes of `preds` in `phase`.
pub fn phase_error(preds: &[Prediction], phase: Phase) -> Option<ErrorStats> {
    let v: Vec<Prediction> = preds
        .iter()
        .filter(|p| p.phase == phase && is_predicted(p))
        .copied()
        .collect();
    ErrorStats::of_predictions(&v)
}

/// The predicted-against-measured report of `preds` (see [`merge_predictions`]): per phase, a
/// heading, one line per op class (predicted against measured time, summed over its calls) and
/// one with the phase's [`ErrorStats`] over the classes with a prediction.
pub fn prediction_lines(c: &Config, preds: &[Prediction]) -> Vec<String> {
    let mut v = Vec::new();
    for phase in [Phase::Prefill, Phase::Decode] {
        let mut rows: Vec<&Prediction> = preds.iter().filter(|p| p.phase == phase).collect();
        if rows.is_empty() {
            continue;
        }
        rows.sort_by_key(|p| (p.k, p.n));
        v.push(format!(
            "predicted vs measured matmul time, {phase} (ops planned on the {phase} curves):"
        ));
        for p in rows {
            let verdict = match p.relative_error() {
                Some(e) if is_predicted(p) => format!("{:+.1}%", e * 100.0),
                _ if !is_predicted(p) => "no prediction".into(),
                _ => "n/a".into(),
            };
            v.push(format!(
                "  {:<22} {:>5}x{:<6} {:>6} calls: predicted {:>10.1} us, measured {:>10.1} us ({verdict})",
                shape_name(c, p.k, p.n),
                p.k,
                p.n,
                p.calls,
                p.predicted_us,
                p.measured_us
            ));
        }
        if let Some(s) = phase_error(preds, phase) {
            v.push(format!(
                "  {} op classes: median |error| {:.1}%, worst {:.1}%, median signed {:+.1}%",
                s.count,
                s.median * 100.0,
                s.worst * 100.0,
                s.bias * 100.0
            ));
        }
    }
    v
}
