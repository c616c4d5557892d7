//! Helpers shared by the simulator test binaries.
#![allow(dead_code)]

use half::f16;
use qnn_sys::simple::{Element, GraphOptions, MatMulGraph, MatMulShape, Order, WeightLayout};
use qnn_sys::Session;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// FP16 unit roundoff (2^-11).
pub const U16: f64 = 1.0 / 2048.0;

/// Random data as the element type, and the same values as f64 (what the graph sees).
pub fn random<T: Elem>(rng: &mut StdRng, len: usize, scale: f64) -> (Vec<T>, Vec<f64>) {
    let v: Vec<T> = (0..len)
        .map(|_| T::from_f64(rng.gen_range(-1.0..1.0) * scale))
        .collect();
    let f = v.iter().map(|x| x.to_f64()).collect();
    (v, f)
}

pub trait Elem: Element + std::fmt::Debug {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    const NAN: Self;
}
impl Elem for f16 {
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    const NAN: Self = f16::NAN;
}
impl Elem for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    const NAN: Self = f32::NAN;
}

/// Checks `y` against the f64 reference `x·w`. `transposed`: y holds Yᵀ[N,M].
///
/// Tolerance, per element: |y - ref| <= 2 u sum_k |x_ik w_kj| + 1e-6, u = 2^-11 (FP16 unit
/// roundoff). The HTP computes float MatMul in FP16 ("relaxed precision", even with FP32 I/O):
/// FP32 inputs are rounded to FP16 (<= u relative each, so <= ~2u per product), partial sums are
/// rounded, and the output is rounded to FP16 (<= u |y| <= u sum|x w|). A naive worst-case bound
/// for a K-term FP16 sum grows with K, but the simulator's measured worst case over these tests is
/// 0.53 u sum|x w| (printed per case), so 2u is a ~4x margin that still catches any wrong element:
/// a wrong index or a missing transpose gives errors of order |y| ~ sum|x w| / sqrt(K) for these
/// random signs, i.e. >= sum|x w| / 16 for K <= 256, far above 2u sum|x w| = sum|x w| / 1024. The relative L2
/// error must also stay below 1e-3 (measured: ~2.1e-4 FP16 I/O, ~3.4e-4 FP32 I/O).
pub fn check<T: Elem>(
    shape: MatMulShape,
    x: &[f64],
    w: &[f64],
    y: &[T],
    transposed: bool,
    what: &str,
) -> f64 {
    let (m, k, n) = (shape.m, shape.k, shape.n);
    let (mut num, mut den, mut worst) = (0f64, 0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let (mut r, mut mag) = (0f64, 0f64);
            for kk in 0..k {
                r += x[i * k + kk] * w[kk * n + j];
                mag += (x[i * k + kk] * w[kk * n + j]).abs();
            }
            let got = if transposed {
                y[j * m + i]
            } else {
                y[i * n + j]
            }
            .to_f64();
            assert!(got.is_finite(), "{what}: y[{i},{j}] = {got} (not written?)");
            let err = (got - r).abs();
            worst = worst.max(err / (U16 * mag + 1e-12));
            assert!(
                err <= 2.0 * U16 * mag + 1e-6,
                "{what}: y[{i},{j}] = {got}, reference {r}, |err| {err:.3e} > 2u*{mag:.3e}"
            );
            num += (got - r) * (got - r);
            den += r * r;
        }
    }
    let rel = (num / den.max(1e-300)).sqrt();
    assert!(rel < 1e-3, "{what}: relative L2 error {rel:.3e}");
    eprintln!("{what}: rel L2 {rel:.2e}, worst |err| / (u sum|xw|) = {worst:.2}");
    rel
}

pub fn run_case<T: Elem>(
    s: &Arc<Session>,
    shape: MatMulShape,
    order: Order,
    opts: &GraphOptions,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (x, xf) = random::<T>(&mut rng, shape.input_len(), 1.0);
    let (w, wf) = random::<T>(&mut rng, shape.weights_len(), 1.0 / (shape.k as f64).sqrt());
    // The reference always uses W[K,N] (wf); the graph gets the layout `opts` names.
    let w = match opts.weights {
        WeightLayout::KxN => w,
        WeightLayout::NxK => (0..shape.n)
            .flat_map(|j| (0..shape.k).map(move |kk| (kk, j)))
            .map(|(kk, j)| w[kk * shape.n + j])
            .collect(),
    };
    let g = match MatMulGraph::new(s, shape, &w, order, opts) {
        Ok(g) => g,
        Err(e) => panic!("{shape:?} {order:?}: build: {e}"),
    };
    let mut y = vec![T::NAN; shape.output_len()];
    // Two executions with the output poisoned before each: the second proves a reused graph
    // rewrites every element.
    for run in 0..2 {
        y.fill(T::NAN);
        if let Err(e) = g.execute(&x, &mut y) {
            panic!("{shape:?} {order:?}: execute: {e}");
        }
        let what = format!(
            "{} {shape:?} {order:?} {:?} run {run}",
            std::any::type_name::<T>(),
            opts.weights
        );
        check(
            shape,
            &xf,
            &wf,
            &y,
            order == Order::WeightFirstTransposedOutput,
            &what,
        );
    }
}
