//! `farmem demo`.

use super::Outcome;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    anyhow::bail!("`farmem demo` is not implemented yet")
}
