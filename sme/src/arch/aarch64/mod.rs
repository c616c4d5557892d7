//! aarch64 kernels: SME2, SME1 and NEON.
