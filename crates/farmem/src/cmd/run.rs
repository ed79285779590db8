//! `farmem run`.

use super::Outcome;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    anyhow::bail!("`farmem run` is not implemented yet")
}
