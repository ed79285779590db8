//! One module per subcommand; each has `Args` (or a subcommand enum) and `run`.

pub mod batch;
pub mod bench;
pub mod config;
pub mod controller;
pub mod demo;
pub mod eval;
pub mod link;
pub mod local;
pub mod memnode;
pub mod node;
pub mod run;
mod run_metrics;
pub mod sim;
pub mod status;
pub mod token;
pub mod trace;
pub mod track;

/// What every subcommand returns: the process exit code, or an error the
/// CLI prints with its context chain.
pub type Outcome = anyhow::Result<std::process::ExitCode>;

/// The middle of `values` (the mean of the middle two for an even count),
/// what is not a number left out; None for none. Every benchmark's and
/// eval's medians are this one.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// A flag's comma-separated list of delay models; a `steps:` model's own
/// commas are kept ([`farmem_policy::delay::DelayModel::parse_list`]).
#[derive(Debug, Clone)]
pub struct DelayModels(pub Vec<farmem_policy::delay::DelayModel>);

impl std::str::FromStr for DelayModels {
    type Err = farmem_policy::delay::DelayParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        farmem_policy::delay::DelayModel::parse_list(s).map(DelayModels)
    }
}

/// A time flag's value: `30s`, `1.5ms`, `400ns`, `2m`, `1h`; a bare number
/// is in `unit` (the one the flag's name or help gives).
fn time_in(s: &str, unit: std::time::Duration) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(unit.as_secs_f64() * n)
            .map_err(|_| format!("`{s}` is not a time (a number from 0, or 30s, 1.5ms, 400ns)"));
    }
    farmem_core::parse_duration_ns(s)
        .map(std::time::Duration::from_nanos)
        .map_err(|e| e.to_string())
}

/// [`time_in`] seconds: for flags whose bare numbers are seconds.
pub fn time_secs(s: &str) -> Result<std::time::Duration, String> {
    time_in(s, std::time::Duration::from_secs(1))
}

/// [`time_in`] milliseconds: for flags whose bare numbers are ms.
pub fn time_ms(s: &str) -> Result<std::time::Duration, String> {
    time_in(s, std::time::Duration::from_millis(1))
}

/// Reads the cluster token, or none (an unauthenticated loopback cluster).
pub fn load_token(path: Option<&std::path::Path>) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    match path {
        None => Ok(Vec::new()),
        Some(p) => {
            let token = farmem_net::read_token_file(p)
                .with_context(|| format!("reading token file {}", p.display()))?;
            anyhow::ensure!(!token.is_empty(), "token file {} is empty", p.display());
            Ok(token)
        }
    }
}

/// Reads the cluster secret a daemon (or `farmem token`) needs: a role's
/// key (`farmem-role-key ...`) is refused, it cannot check other roles.
pub fn load_secret(path: Option<&std::path::Path>) -> anyhow::Result<Vec<u8>> {
    let token = load_token(path)?;
    anyhow::ensure!(
        farmem_wire::auth::parse_role_key(&token).is_none(),
        "token file {} holds a role key; this needs the cluster secret itself",
        path.map(|p| p.display().to_string()).unwrap_or_default()
    );
    Ok(token)
}

/// Tells the operator (stderr) or a supervising process (one JSON line on
/// stdout) that a daemon is serving.
/// Starts a daemon's Prometheus endpoint on `addr` (`--metrics`), saying
/// where on stderr.
pub fn serve_metrics(
    addr: &str,
    scrape: impl Fn() -> farmem_net::metrics::Scrape + Send + Sync + 'static,
) -> anyhow::Result<farmem_net::metrics::MetricsServer> {
    use anyhow::Context as _;
    let server = farmem_net::metrics::MetricsServer::start(addr, scrape)
        .with_context(|| format!("serving metrics on {addr} (--metrics)"))?;
    eprintln!("farmem: metrics on http://{}/metrics", server.local_addr());
    Ok(server)
}

pub fn announce(json: bool, object: serde_json::Value, human: &str) {
    use std::io::Write;
    if json {
        println!("{object}");
        let _ = std::io::stdout().flush();
    } else {
        eprintln!("farmem: {human}");
    }
}

fn termination_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Blocks SIGINT and SIGTERM in this thread and every thread it spawns
/// afterwards, so [`wait_for_signal`] can take them synchronously. Call it
/// before starting a daemon's threads.
pub fn block_termination_signals() {
    let set = termination_signals();
    // SAFETY: valid set, null old-set pointer is allowed.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for SIGINT or SIGTERM (blocked earlier by [`block_termination_signals`]).
/// Waits for SIGINT or SIGTERM; its name.
pub fn wait_for_signal() -> &'static str {
    let set = termination_signals();
    let mut sig = 0;
    // SAFETY: valid set and out-pointer.
    unsafe {
        libc::sigwait(&set, &mut sig);
    }
    if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        // Two runs: their mean, not the larger.
        assert_eq!(median(&[512.0, 287.0]), Some(399.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }
}
