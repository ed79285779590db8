//! farmem rack controller.

pub mod extent;
