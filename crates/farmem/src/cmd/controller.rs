//! `farmem controller`.

use super::Outcome;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    anyhow::bail!("`farmem controller` is not implemented yet")
}
