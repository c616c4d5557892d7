//! Criterion benches of the sme kernels (being written).
fn main() {}
