//! Uniform statistics: every component reports named values under its own
//! prefix into one flat map (after Ramulator 2.0), which `--json` prints.

use std::collections::BTreeMap;

/// Named values, `component.stat`.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(transparent)]
pub struct Stats(BTreeMap<String, f64>);

impl Stats {
    pub fn put(&mut self, prefix: &str, key: &str, value: f64) {
        self.0.insert(format!("{prefix}.{key}"), value);
    }
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&String, &f64)> {
        self.0.iter()
    }
}

/// Anything that keeps statistics.
pub trait Component {
    /// Writes this component's statistics under `prefix`; `sim_time_ns`
    /// turns busy times into utilizations.
    fn report(&self, prefix: &str, sim_time_ns: f64, out: &mut Stats);
}
