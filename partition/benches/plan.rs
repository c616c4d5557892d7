//! Planning benchmark (filled in below).
fn main() {}
