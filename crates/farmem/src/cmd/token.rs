//! `farmem token`: derive a role's key from the cluster secret.

use std::path::PathBuf;

use farmem_wire::{Role, auth};

use super::Outcome;

/// Print the key of one role, derived from the cluster secret.
///
/// Give compute nodes only the compute key (put the printed line in their
/// --token-file): with it they can reach the rack, but cannot pass as the
/// controller or a memory node, which hold the secret itself.
///
/// Example: farmem token --role compute --token-file /etc/farmem/secret > compute.key
#[derive(clap::Args)]
pub struct Args {
    /// The role whose key to print: compute, memnode, controller or admin.
    #[arg(long, default_value = "compute", value_parser = parse_role)]
    role: Role,
    /// File holding the cluster secret.
    #[arg(long)]
    token_file: PathBuf,
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::from_name(s).ok_or_else(|| {
        format!("unknown role `{s}`: expected compute, memnode, controller or admin")
    })
}

pub fn run(args: Args) -> Outcome {
    let secret = super::load_secret(Some(&args.token_file))?;
    let key = auth::role_key(&secret, args.role);
    println!("{}", auth::format_role_key(args.role, &key));
    Ok(std::process::ExitCode::SUCCESS)
}
