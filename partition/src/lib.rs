#![doc = include_str!("../README.md")]

mod budget;
mod model;
mod plan;
mod profile;
mod table;

pub use budget::{BudgetError, BudgetParams, DraftBudget, MAX_AGENTS};
pub use model::{
    plan_model, split_heads, LayerOp, ModelDesc, ModelError, ModelPlan, Phase, Placement, Policy,
    MAX_LAYER_OPS,
};
pub use plan::{
    edge_cpu_cols, plan_op, ratio_cols, Cost, NpuExec, OpPlan, Piece, Pieces, PlanError, Split,
    Strategy, COL_TILE, CPU_ROW_TILE, ELEM_BYTES, NPU_ROW_TILE,
};
pub use profile::{
    Backend, BackendProfile, CheckedProfile, LatencyPoint, Order, Profile, ProfileError,
    MAX_STANDARD,
};
pub use table::{PlanTable, TableError, MAX_TABLE_M, MAX_TABLE_SHAPES};
