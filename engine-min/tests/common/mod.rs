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
