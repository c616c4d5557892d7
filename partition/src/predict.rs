//! Predictions set beside measurements: what the plans an engine executed predicted for one op
//! class (a weight shape) in one phase, what the engine measured for the same ops, and the
//! spread of the relative errors over classes.

use core::fmt;

use crate::plan::OpPlan;
use crate::profile::Phase;

/// Why a measurement was not recorded (nothing changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredictionError {
    /// The plan is for another weight shape than the prediction's class.
    ShapeMismatch {
        /// The class's `(k, n)`.
        class: (u32, u32),
        /// The plan's `(k, n)`.
        plan: (u32, u32),
    },
    /// A measured time that is NaN, infinite or negative.
    BadTime,
}

impl fmt::Display for PredictionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PredictionError::ShapeMismatch { class, plan } => write!(
                f,
                "plan for k={} n={} recorded in the class k={} n={}",
                plan.0, plan.1, class.0, class.1
            ),
            PredictionError::BadTime => f.write_str("measured time must be finite and >= 0"),
        }
    }
}

impl std::error::Error for PredictionError {}

/// Predicted and measured time of one op class (weight shape `k x n`) in one phase, summed over
/// the ops an engine executed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// Reduction dimension of the class.
    pub k: u32,
    /// Output columns of the class.
    pub n: u32,
    /// The phase.
    pub phase: Phase,
    /// Ops recorded.
    pub calls: u64,
    /// Sum of their plans' predicted times, µs.
    pub predicted_us: f64,
    /// Sum of their measured times, µs.
    pub measured_us: f64,
}

impl Prediction {
    /// An empty record for the class `k x n` in `phase`.
    pub fn new(k: u32, n: u32, phase: Phase) -> Prediction {
        Prediction {
            k,
            n,
            phase,
            calls: 0,
            predicted_us: 0.0,
            measured_us: 0.0,
        }
    }

    /// Adds one executed op: the plan it ran and the time the engine measured for it.
    pub fn record(&mut self, plan: &OpPlan, measured_us: f64) -> Result<(), PredictionError> {
        if (plan.k, plan.n) != (self.k, self.n) {
            return Err(PredictionError::ShapeMismatch {
                class: (self.k, self.n),
                plan: (plan.k, plan.n),
            });
        }
        if !(measured_us.is_finite() && measured_us >= 0.0) {
            return Err(PredictionError::BadTime);
        }
        self.calls += 1;
        self.predicted_us += plan.predicted_us();
        self.measured_us += measured_us;
        Ok(())
    }

    /// `(predicted − measured) / measured`: positive when the plans predicted too much time.
    /// `None` before any measured time.
    pub fn relative_error(&self) -> Option<f64> {
        (self.measured_us > 0.0).then(|| (self.predicted_us - self.measured_us) / self.measured_us)
    }
}

/// Spread of relative prediction errors: the median and the worst magnitude, and the median
/// signed error (the bias: positive when predictions run slow).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorStats {
    /// Errors counted.
    pub count: usize,
    /// Median of `|error|` (mean of the two middle ones for an even count).
    pub median: f64,
    /// Largest `|error|`.
    pub worst: f64,
    /// Median of the signed errors.
    pub bias: f64,
}

fn median_sorted(v: &[f64]) -> f64 {
    let h = v.len() / 2;
    if v.len() % 2 == 1 {
        v[h]
    } else {
        (v[h - 1] + v[h]) / 2.0
    }
}

impl ErrorStats {
    /// The statistics of `errors` (relative errors, signed). The caller's buffer is used as
    /// scratch: it ends up holding the sorted magnitudes; nothing is allocated. `None` (buffer
    /// untouched) when it is empty or holds a NaN or infinity.
    pub fn of(errors: &mut [f64]) -> Option<ErrorStats> {
        if errors.is_empty() || errors.iter().any(|e| !e.is_finite()) {
            return None;
        }
        errors.sort_unstable_by(f64::total_cmp);
        let bias = median_sorted(errors);
        for e in errors.iter_mut() {
            *e = e.abs();
        }
        errors.sort_unstable_by(f64::total_cmp);
        Some(ErrorStats {
            count: errors.len(),
            median: median_sorted(errors),
            worst: errors[errors.len() - 1],
            bias,
        })
    }

    /// The statistics of each prediction's relative error (those with a measured time). A
    /// report, not a hot path: collects the errors into a new vector.
    pub fn of_predictions(predictions: &[Prediction]) -> Option<ErrorStats> {
        let mut e: Vec<f64> = predictions
            .iter()
            .filter_map(Prediction::relative_error)
            .collect();
        ErrorStats::of(&mut e)
    }
}
