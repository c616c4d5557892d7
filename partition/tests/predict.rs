//! Predictions beside measurements: recording, relative errors, and their median / worst.

mod common;
use common::*;
use hetero_partition::*;

#[test]
fn a_prediction_sums_plans_and_measurements() {
    let p = sample().check().unwrap();
    let plan = plan_op_in(&p, Phase::Prefill, 1024, 1024, 64).unwrap();
    let mut pr = Prediction::new(1024, 1024, Phase::Prefill);
    assert_eq!(pr.relative_error(), None);
    pr.record(&plan, 120.0).unwrap();
    pr.record(&plan, 80.0).unwrap();
    assert_eq!(pr.calls, 2);
    assert_eq!(pr.predicted_us, 2.0 * plan.predicted_us());
    assert_eq!(pr.measured_us, 200.0);
    let want = (2.0 * plan.predicted_us() - 200.0) / 200.0;
    assert!((pr.relative_error().unwrap() - want).abs() < 1e-15);
    // Bad input changes nothing.
    let before = pr;
    let other = plan_op_in(&p, Phase::Prefill, 1024, 2048, 64).unwrap();
    assert_eq!(
        pr.record(&other, 1.0),
        Err(PredictionError::ShapeMismatch {
            class: (1024, 1024),
            plan: (1024, 2048)
        })
    );
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        assert_eq!(pr.record(&plan, bad), Err(PredictionError::BadTime));
    }
    assert_eq!(pr, before);
    assert!(PredictionError::BadTime.to_string().contains("finite"));
}

#[test]
fn error_stats_by_hand() {
    // Odd count: the middle magnitude; the worst magnitude keeps no sign; the bias is the
    // median signed error.
    let mut e = [0.10, -0.30, 0.05, -0.02, 0.20];
    let s = ErrorStats::of(&mut e).unwrap();
    assert_eq!(s.count, 5);
    assert_eq!(s.median, 0.10);
    assert_eq!(s.worst, 0.30);
    assert_eq!(s.bias, 0.05);
    // Even count: the mean of the two middle ones (|e| sorted 0.1, 0.2, 0.4, 0.5).
    let mut e = [-0.5, 0.1, 0.4, -0.2];
    let s = ErrorStats::of(&mut e).unwrap();
    assert!((s.median - 0.3).abs() < 1e-15);
    assert_eq!(s.worst, 0.5);
    assert!((s.bias - (-0.05)).abs() < 1e-15);
    // Nothing, or a non-finite error: no statistics.
    assert_eq!(ErrorStats::of(&mut []), None);
    assert_eq!(ErrorStats::of(&mut [0.1, f64::NAN]), None);
}

#[test]
fn error_stats_over_predictions_skip_unmeasured_classes() {
    let p = sample().check().unwrap();
    let mut preds = Vec::new();
    for (n, measured) in [(1024, Some(1.25)), (2048, Some(0.8)), (512, None)] {
        let plan = plan_op_in(&p, Phase::Prefill, 1024, n, 64).unwrap();
        let mut pr = Prediction::new(1024, n, Phase::Prefill);
        if let Some(f) = measured {
            // Measured f times the prediction: relative error 1/f − 1.
            pr.record(&plan, plan.predicted_us() * f).unwrap();
        }
        preds.push(pr);
    }
    let s = ErrorStats::of_predictions(&preds).unwrap();
    assert_eq!(s.count, 2);
    // Errors 1/1.25 − 1 = −0.2 and 1/0.8 − 1 = 0.25.
    assert!((s.worst - 0.25).abs() < 1e-12);
    assert!((s.median - 0.225).abs() < 1e-12);
}
