//! `farmem eval daemon`.

use super::Args;
use crate::cmd::Outcome;

pub fn run(_args: Args) -> Outcome {
    anyhow::bail!("`farmem eval daemon` is not built yet (try `farmem eval daemon-fig3`)")
}
