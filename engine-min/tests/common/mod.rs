//! Shared helpers for the model tests.
#![allow(dead_code)]

/// The model path from `HETERO_MODEL`, or why it is unusable.
pub fn model_path() -> Result<std::path::PathBuf, String> {
    let p = std::env::var("HETERO_MODEL").map_err(|_| "HETERO_MODEL is not set".to_string())?;
    let p = std::path::PathBuf::from(p);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("HETERO_MODEL={} is not a file", p.display()))
    }
}

/// Total-variation distance between the softmax distributions of two logit rows.
pub fn tv(a: &[f32], b: &[f32]) -> f64 {
    let sm = |x: &[f32]| {
        let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = x.iter().map(|&v| f64::from(v - mx).exp()).collect();
        let z: f64 = e.iter().sum();
        e.into_iter().map(move |v| v / z)
    };
    sm(a).zip(sm(b)).map(|(p, q)| (p - q).abs()).sum::<f64>() / 2.0
}

/// Largest |a - b| over two logit rows.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
