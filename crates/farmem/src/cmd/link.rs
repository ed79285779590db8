//! `farmem link`: a named link that programs under `farmem run --link NAME`
//! share, shown and changed while they run.

use anyhow::Context;
use farmem_net::link::{LinkError, SharedLink};
use farmem_policy::delay::DelayModel;

use super::Outcome;

/// Show or change a shared link (ThymesisFlow's injected delay, live).
///
/// Programs started with `farmem run --link NAME` take turns at one gate
/// on that link, so its bandwidth divides among them, and they feel a
/// delay set here from their next request on, without a restart.
///
/// Examples:
///   farmem link set lab --delay 50us      every program on `lab`: 50 µs
///   farmem link set lab --delay rate:200MiB/s
///   farmem link show lab --json
///   farmem link remove lab
#[derive(clap::Subcommand)]
#[command(verbatim_doc_comment)]
pub enum Link {
    /// Set the link's delay (made if missing), for every program on it.
    Set {
        name: String,
        /// A model, as `farmem run --delay` takes, but `steps:` (step the
        /// delay with successive `link set` instead).
        #[arg(long, value_name = "MODEL")]
        delay: DelayModel,
    },
    /// Print the link's delay and what passed it.
    Show {
        name: String,
        /// Print one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Remove the link; programs on it keep their gate until they exit.
    Remove { name: String },
}

pub fn run(cmd: Link) -> Outcome {
    match cmd {
        Link::Set { name, delay } => {
            SharedLink::open_or_create(&name, Some(&delay))?;
            eprintln!("farmem: link {name}: delay {delay}");
        }
        Link::Show { name, json } => {
            let link = SharedLink::open(&name)?;
            let (requests, bytes) = link.totals();
            let delay = link.model().to_string();
            if json {
                let v = serde_json::json!({
                    "link": name, "delay": delay, "requests": requests, "bytes": bytes,
                });
                println!("{v}");
            } else {
                println!("link {name}: delay {delay}; {requests} requests, {bytes} bytes so far");
            }
        }
        Link::Remove { name } => {
            // A page a crashed `farmem run` left half made goes too.
            match SharedLink::open(&name) {
                Ok(_) | Err(LinkError::NotALink { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let path = SharedLink::path(&name);
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}
