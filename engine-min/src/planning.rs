//! What `engine-min plan` prints: the model's matmul shapes by name and one line per plan.
//! The measuring is [`crate::profiler`]'s, the deciding [`crate::auto`]'s.

use hetero_partition::{ErrorStats, OpPlan, Prediction};

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

/// One line per op class of `preds` (predicted against measured time, summed over its calls)
/// and one with their [`ErrorStats`] (median and worst relative error over the classes).
pub fn prediction_lines(c: &Config, preds: &[Prediction]) -> Vec<String> {
    let mut v: Vec<String> = preds
        .iter()
        .map(|p| {
            let err = p
                .relative_error()
                .map_or("n/a".into(), |e| format!("{:+.1}%", e * 100.0));
            format!(
                "{:<22} {:>5}x{:<6} {:<7} {:>6} calls: predicted {:>10.1} us, measured {:>10.1} us ({err})",
                shape_name(c, p.k, p.n),
                p.k,
                p.n,
                p.phase.to_string(),
                p.calls,
                p.predicted_us,
                p.measured_us
            )
        })
        .collect();
    if let Some(s) = ErrorStats::of_predictions(preds) {
        v.push(format!(
            "{} op classes: median |error| {:.1}%, worst {:.1}%, median signed {:+.1}%",
            s.count,
            s.median * 100.0,
            s.worst * 100.0,
            s.bias * 100.0
        ));
    }
    v
}
