//! What a simulation replays: a built-in workload, a trace file, or several
//! at once.

use std::path::PathBuf;

use farmem_workloads::Scale;

/// What to replay.
#[derive(Debug, Clone)]
pub enum Input {
    Workload {
        name: String,
        scale: Scale,
        seed: u64,
    },
    Trace(PathBuf),
    /// Several inputs at once, one core each (`core.count` must match).
    Multi(Vec<Input>),
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Input::Workload { name, .. } => name.clone(),
            Input::Trace(p) => p.display().to_string(),
            Input::Multi(v) => v.iter().map(Input::name).collect::<Vec<_>>().join("+"),
        }
    }
}
