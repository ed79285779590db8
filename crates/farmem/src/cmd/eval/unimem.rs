//! `farmem eval unimem`.

use super::Args;
use crate::cmd::Outcome;

pub fn run(_args: Args) -> Outcome {
    anyhow::bail!("`farmem eval unimem` is not built yet (try `farmem eval daemon-fig3`)")
}
