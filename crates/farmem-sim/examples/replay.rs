//! Replays a trace or workload without the CLI, for speed measurements:
//! `cargo run --release -p farmem-sim --example replay -- (TRACE|workload:NAME) [SCHEME]`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let what = args
        .next()
        .ok_or("usage: replay (TRACE|workload:NAME) [SCHEME]")?;
    let scheme = args.next().unwrap_or_else(|| "remote".into());
    let input = match what.strip_prefix("workload:") {
        Some(name) => farmem_sim::Input::Workload {
            name: name.into(),
            scale: Default::default(),
            seed: 1,
        },
        None => farmem_sim::Input::Trace(what.clone().into()),
    };
    if scheme == "decode" {
        // Decoding alone: what the trace format costs.
        let t = std::time::Instant::now();
        let mut r = farmem_workloads::TraceReader::open(std::path::Path::new(&what))?;
        let mut sink = farmem_workloads::record::CountingSink::default();
        let n = r.replay(&mut sink)?;
        let s = t.elapsed().as_secs_f64();
        println!(
            "{{\"records\":{n},\"wall_seconds\":{s},\"records_per_sec\":{}}}",
            n as f64 / s
        );
        return Ok(());
    }
    let cfg = farmem_sim::Config::preset("daemon")?;
    let mut r = farmem_sim::simulate(&cfg, &scheme, &input)?;
    r.stats = Default::default();
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}
