//! `farmem bench swap`'s report: every run, and per config the minimum and
//! median time, the ratio to local, faults, peak memory and swap traffic.

use std::collections::BTreeSet;

use farmem_core::ByteSize;
use serde_json::{Value, json};

use super::swap_plan::Config;
use crate::cmd::median;

/// Everything the report is built from.
pub struct Report<'a> {
    pub workload: Value,
    pub local: String,
    pub footprint: u64,
    pub limit: u64,
    pub rounds: u32,
    pub order: &'a [Vec<Config>],
    pub configs: &'a [Config],
    pub skipped: &'a [(Config, String)],
    pub runs: &'a [Value],
    pub host: Value,
}

fn min(v: &[f64]) -> Option<f64> {
    v.iter().copied().filter(|x| x.is_finite()).reduce(f64::min)
}

/// The values of `key` (a JSON pointer) over `runs`.
fn each(runs: &[&Value], key: &str) -> Vec<f64> {
    runs.iter()
        .filter_map(|r| r.pointer(key)?.as_f64())
        .collect()
}

impl Report<'_> {
    pub fn build(&self) -> Value {
        let ok = |r: &&Value| r["outcome"] == "ok";
        let results: BTreeSet<&str> = self
            .runs
            .iter()
            .filter(ok)
            .filter_map(|r| r["result"].as_str())
            .collect();
        let failed = self
            .runs
            .iter()
            .filter(|r| r["outcome"] != "ok" && r["outcome"] != "oom_killed")
            .count();
        let local_median = |key: &str| {
            let runs: Vec<&Value> = self
                .runs
                .iter()
                .filter(|r| r["config"] == "local")
                .filter(ok)
                .collect();
            median(&each(&runs, key))
        };
        let (local_wall, local_work) = (
            local_median("/wall_seconds"),
            local_median("/workload_seconds"),
        );
        let configs: Vec<Value> = self
            .configs
            .iter()
            .map(|&c| self.config(c, local_wall, local_work))
            .collect();
        json!({
            "benchmark": "swap",
            "workload": self.workload,
            "local": self.local,
            "footprint_bytes": self.footprint,
            "local_mem_bytes": self.limit,
            "rounds": self.rounds,
            "order": self.order.iter().map(|r| r.iter().map(|c| c.name()).collect::<Vec<_>>()).collect::<Vec<_>>(),
            "configs": configs,
            "results_match": results.len() == 1,
            "result": (results.len() == 1).then(|| results.first().copied()).flatten(),
            "failed_runs": failed,
            "host": self.host,
            "runs": self.runs,
        })
    }

    fn config(&self, c: Config, local_wall: Option<f64>, local_work: Option<f64>) -> Value {
        if let Some((_, why)) = self.skipped.iter().find(|(s, _)| *s == c) {
            return json!({"name": c.name(), "skipped": why});
        }
        let all: Vec<&Value> = self
            .runs
            .iter()
            .filter(|r| r["config"] == c.name())
            .collect();
        let ok: Vec<&Value> = all
            .iter()
            .copied()
            .filter(|r| r["outcome"] == "ok")
            .collect();
        let wall = each(&ok, "/wall_seconds");
        let work = each(&ok, "/workload_seconds");
        let ratio = |m: Option<f64>, base: Option<f64>| Some(m? / base.filter(|b| *b > 0.0)?);
        let max_u64 = |key: &str| ok.iter().filter_map(|r| r.pointer(key)?.as_u64()).max();
        let med = |key: &str| median(&each(&ok, key)).map(|m| m.round() as u64);
        let mut v = json!({
            "name": c.name(),
            "runs": all.len(),
            "ok": ok.len(),
            "oom_killed": all.iter().filter(|r| r["outcome"] == "oom_killed").count(),
            "wall_seconds": {"each": wall, "min": min(&wall), "median": median(&wall)},
            "ratio_to_local": ratio(median(&wall), local_wall),
            "workload_seconds": {"each": work, "min": min(&work), "median": median(&work)},
            "workload_ratio_to_local": ratio(median(&work), local_work),
            "major_faults_median": med("/major_faults"),
            "swap_ins_median": med("/swap_ins"),
            "peak_rss_bytes_max": max_u64("/peak_rss_bytes"),
            // How far the peak went past the local memory it was given
            // (negative: under it); none for the unlimited local runs.
            "peak_rss_over_limit": max_u64("/peak_rss_bytes")
                .filter(|_| c != Config::Local && self.limit > 0)
                .map(|p| p as f64 / self.limit as f64 - 1.0),
            "cgroup_peak_bytes_max": max_u64("/cgroup/peak_bytes"),
            "setup": all.first().map(|r| r["setup"].clone()),
        });
        if matches!(c, Config::Farmem(_)) {
            v["farmem_faults_missing_median"] = json!(med("/farmem/faults_missing"));
            v["farmem_faults_wp_median"] = json!(med("/farmem/faults_wp"));
            v["farmem_room_pages_median"] = json!(med("/farmem/room_pages_mean"));
            // Each tier's traffic, the median of each counter the runs report.
            let keys: std::collections::BTreeSet<String> = ok
                .iter()
                .filter_map(|r| r.pointer("/farmem/tiers")?.as_object())
                .flat_map(|t| t.keys().cloned())
                .collect();
            v["tiers_median"] = keys
                .iter()
                .map(|k| (k.clone(), json!(med(&format!("/farmem/tiers/{k}")))))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        if matches!(c, Config::Kernel(_)) {
            v["cgroup_pgmajfault_median"] = json!(med("/cgroup/pgmajfault"));
        }
        v
    }
}

/// One run in a line, for progress on stderr.
pub fn one_line(r: &Value) -> String {
    let mut s = format!(
        "{} in {:.1} s, {} major faults, peak RSS {}",
        r["outcome"].as_str().unwrap_or("?"),
        r["wall_seconds"].as_f64().unwrap_or(f64::NAN),
        r["major_faults"],
        ByteSize(r["peak_rss_bytes"].as_u64().unwrap_or(0)),
    );
    if let Some(n) = r["swap_ins"].as_u64().filter(|&n| n > 0) {
        s += &format!(", {n} swap-ins");
    }
    if let Some(f) = r.get("farmem").filter(|f| f.is_object()) {
        s += &format!(
            ", farmem faults {} + {} wp",
            f["faults_missing"], f["faults_wp"]
        );
        if let (Some(room), Some(limit)) = (
            f["room_pages_mean"].as_u64(),
            f["limit_pages"].as_u64().filter(|&l| l > 0),
        ) {
            s += &format!(
                ", cache room {:.0}% of the limit",
                room as f64 * 100.0 / limit as f64
            );
        }
    }
    s
}

/// The report as a table on stdout.
pub fn print_table(report: &Value) {
    let bytes = |v: &Value| v.as_u64().map_or("-".into(), |b| ByteSize(b).to_string());
    let secs = |v: &Value| v.as_f64().map_or("-".into(), |s| format!("{s:.1}"));
    println!(
        "{}: local memory {} ({} of a {} footprint), {} round(s)",
        report["workload"]["command"].as_str().unwrap_or("?"),
        bytes(&report["local_mem_bytes"]),
        report["local"].as_str().unwrap_or("?"),
        bytes(&report["footprint_bytes"]),
        report["rounds"],
    );
    println!(
        "{:<17} {:>8} {:>8} {:>7} {:>9} {:>12} {:>12} {:>16} {:>10} {:>10}",
        "config",
        "median s",
        "min s",
        "x local",
        "program s",
        "major flt",
        "farmem flt",
        "peak RSS",
        "cg peak",
        "swap-ins"
    );
    for c in report["configs"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?");
        if let Some(why) = c["skipped"].as_str() {
            println!("{name:<17} skipped: {why}");
            continue;
        }
        let farmem = match (
            c["farmem_faults_missing_median"].as_u64(),
            c["farmem_faults_wp_median"].as_u64(),
        ) {
            (Some(m), Some(w)) => format!("{m}+{w}"),
            _ => "-".into(),
        };
        let oom = c["oom_killed"].as_u64().unwrap_or(0);
        println!(
            "{name:<17} {:>8} {:>8} {:>7} {:>9} {:>12} {:>12} {:>16} {:>10} {:>10}{}",
            secs(&c["wall_seconds"]["median"]),
            secs(&c["wall_seconds"]["min"]),
            c["ratio_to_local"]
                .as_f64()
                .map_or("-".into(), |r| format!("{r:.2}x")),
            secs(&c["workload_seconds"]["median"]),
            c["major_faults_median"]
                .as_u64()
                .map_or("-".into(), |n| n.to_string()),
            farmem,
            match c["peak_rss_over_limit"].as_f64() {
                Some(o) if o > 0.0 =>
                    format!("{} (+{:.0}%)", bytes(&c["peak_rss_bytes_max"]), o * 100.0),
                _ => bytes(&c["peak_rss_bytes_max"]),
            },
            bytes(&c["cgroup_peak_bytes_max"]),
            c["swap_ins_median"]
                .as_u64()
                .map_or("-".into(), |n| n.to_string()),
            if oom > 0 {
                format!("  ({oom} OOM-killed)")
            } else {
                String::new()
            },
        );
    }
    println!(
        "{}",
        if report["results_match"] == json!(true) {
            format!(
                "every config computed the same result ({})",
                report["result"].as_str().unwrap_or("?")
            )
        } else {
            "the configs' results DIFFER (or none finished)".into()
        }
    );
    println!(
        "(seconds: wall time of each whole run, farmem's rack start included; program s: the time the demo measured itself; farmem's peak RSS is its program's, the memory nodes of its rack hold the far pages)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench::kernel_swap::Backing;
    use crate::cmd::bench::swap_plan::FarBackend;

    fn run(config: &str, outcome: &str, secs: f64, result: &str) -> Value {
        json!({"config": config, "outcome": outcome, "wall_seconds": secs, "result": result,
               "major_faults": 10, "peak_rss_bytes": 100})
    }

    #[test]
    fn ratios_matches_and_failures_are_reported() {
        let configs = [
            Config::Local,
            Config::Kernel(Backing::Zram),
            Config::Farmem(FarBackend::Remote),
        ];
        let runs = [
            run("local", "ok", 2.0, "aa"),
            run("zram", "ok", 6.0, "aa"),
            run("farmem", "ok", 5.0, "aa"),
            run("local", "ok", 4.0, "aa"),
            run("zram", "oom_killed", 1.0, ""),
            run("farmem", "exit 70", 1.0, ""),
        ];
        let order = super::super::swap_plan::plan(&configs, 2);
        let r = Report {
            runs: &runs,
            ..r_base(&order, &configs)
        }
        .build();
        assert_eq!(r["results_match"], true);
        assert_eq!(r["result"], "aa");
        assert_eq!(r["failed_runs"], 1);
        let zram = &r["configs"][1];
        assert_eq!(zram["oom_killed"], 1);
        assert_eq!(zram["ratio_to_local"], 2.0);
        assert_eq!(r["configs"][2]["ok"], 1);
        assert_eq!(r["order"][1], json!(["zram", "farmem", "local"]));

        let mut differ = runs.to_vec();
        differ[2]["result"] = json!("bb");
        let r = Report {
            runs: &differ,
            ..r_base(&order, &configs)
        }
        .build();
        assert_eq!(r["results_match"], false);
    }

    #[test]
    fn a_peak_past_the_limit_is_reported_as_a_share_of_it() {
        let configs = [Config::Local, Config::Farmem(FarBackend::Remote)];
        let mut runs = [
            run("local", "ok", 2.0, "aa"),
            run("farmem", "ok", 3.0, "aa"),
        ];
        runs[1]["peak_rss_bytes"] = json!(110);
        let order = super::super::swap_plan::plan(&configs, 1);
        let r = Report {
            runs: &runs,
            limit: 100,
            ..r_base(&order, &configs)
        }
        .build();
        assert_eq!(r["configs"][0]["peak_rss_over_limit"], Value::Null);
        let over = r["configs"][1]["peak_rss_over_limit"].as_f64().unwrap();
        assert!((over - 0.1).abs() < 1e-9, "{over}");
    }

    fn r_base<'a>(order: &'a [Vec<Config>], configs: &'a [Config]) -> Report<'a> {
        Report {
            workload: json!({}),
            local: String::new(),
            footprint: 0,
            limit: 0,
            rounds: 1,
            order,
            configs,
            skipped: &[],
            runs: &[],
            host: json!({}),
        }
    }

    #[test]
    fn a_farmem_run_line_says_what_share_of_the_limit_its_cache_had() {
        let mut r = run("farmem", "ok", 1.0, "x");
        r["farmem"] = json!({"faults_missing": 5, "faults_wp": 1,
                             "room_pages_mean": 768, "limit_pages": 1536});
        let line = one_line(&r);
        assert!(
            line.ends_with("farmem faults 5 + 1 wp, cache room 50% of the limit"),
            "{line}"
        );
        // A stats file without the room (an older runtime): no share.
        r["farmem"] = json!({"faults_missing": 5, "faults_wp": 1});
        assert!(one_line(&r).ends_with("1 wp"));
    }
}
