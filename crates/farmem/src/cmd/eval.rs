//! `farmem eval`.

use super::Outcome;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    anyhow::bail!("`farmem eval` is not implemented yet")
}
