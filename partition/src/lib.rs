#![doc = include_str!("../README.md")]

mod budget;
#[cfg(feature = "capi")]
pub mod capi;
mod checked;
mod curve;
mod model;
mod opmodel;
mod plan;
mod predict;
mod profile;
mod solver;
mod table;

pub use budget::{BudgetError, BudgetParams, DraftBudget, MAX_AGENTS};
pub use checked::{
    CheckedProfile, ProfileError, CPU_ROW_TILE, DEFAULT_WEIGHT_BYTES, MAX_STANDARD, NPU_ROW_TILE,
};
pub use model::{
    plan_model, split_heads, LayerOp, ModelDesc, ModelError, ModelPlan, Placement, Policy,
    MAX_LAYER_OPS,
};
pub use plan::{
    edge_cpu_cols, plan_op, plan_op_in, plan_with, ratio_cols, Cost, Extrapolation, NpuExec,
    OpPlan, Piece, Pieces, PlanError, Split, Strategy, COL_TILE, ELEM_BYTES, FAR,
};
pub use predict::{ErrorStats, Prediction, PredictionError};
pub use profile::{
    Backend, BackendProfile, LatencyPoint, Order, PairProfile, ParseError, PathProfile, Phase,
    Profile, DEFAULT_MIN_SPLIT_GAIN,
};
pub use table::{PlanTable, TableError, MAX_TABLE_M, MAX_TABLE_SHAPES};
