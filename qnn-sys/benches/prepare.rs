//! Placeholder (replaced by the finalize/execute timing table).
fn main() {}
