//! `farmem memnode`.

use super::Outcome;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    anyhow::bail!("`farmem memnode` is not implemented yet")
}
