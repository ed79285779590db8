//! The hardware: CPU cache levels, DRAM devices, links, local memory and the
//! page table. Devices and links are traits chosen by `model` name in the
//! config, so new models plug in here without touching the engine.

mod cache;
mod link;
mod local;
mod memory;
mod page_table;

pub use cache::{CacheLevel, Caches};
pub use link::{Dir, FifoLink, Link, background_slowdown, build_link};
pub use local::LocalMemory;
pub use memory::{Dram, Memory, build_memory};
pub use page_table::{PageInfo, PageTable};

use farmem_policy::cache::PolicyConfig;

use crate::config::{LinkModel, Placement, RemoteModel};

/// Every config key that names an implementation, with the names it takes
/// (`farmem sim --list`).
pub fn models() -> Vec<(&'static str, &'static [&'static str])> {
    use farmem_policy::cache::SetRuleKind;
    vec![
        ("core.model", crate::core::CoreKind::NAMES),
        ("l1d|l2|llc.replacement", SetRuleKind::NAMES),
        ("local.policy", PolicyConfig::NAMES),
        ("link.model", LinkModel::NAMES),
        ("remote.model", RemoteModel::NAMES),
        ("remote.placement", Placement::NAMES),
    ]
}
