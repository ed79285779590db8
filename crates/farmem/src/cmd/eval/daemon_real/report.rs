//! `farmem eval daemon-real`'s table, checks and outputs, and the
//! simulator's prediction beside them.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use anyhow::Context;
use farmem_sim::eval::figure::{self, BarChart, Series};
use serde_json::{Map, Value, json};

use super::plan::{Config, PAPER, POINTS, Program};
use crate::cmd::bench::measure;

/// The simulator's scale of each prediction (`farmem sim --scale`).
const SIM_SCALE: &str = "0.25";

/// The simulator's bandwidth factor of a point.
fn factor(point: &str) -> &str {
    if point == "full" { "1" } else { point }
}

/// `farmem sim` over `p`'s workload of the same kind, every config's
/// scheme at every point: `{config: {point: speedup over remote}}`.
pub fn predict(p: Program, configs: &[Config], quick: bool) -> anyhow::Result<Value> {
    let schemes: Vec<&str> = configs.iter().map(|c| c.scheme).collect();
    let factors: Vec<&str> = POINTS.iter().map(|(p, _)| factor(p)).collect();
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["sim", "--workload", p.sim_workload(), "--json"])
        .args(["--scheme", &schemes.join(",")])
        .args(["--scale", SIM_SCALE])
        .args(["--set", &format!("link.bw_factor={}", factors.join(","))]);
    let limit = std::time::Duration::from_secs(if quick { 600 } else { 1800 });
    let m = measure::run(&mut cmd, Some(limit))?;
    anyhow::ensure!(
        m.outcome() == "ok",
        "farmem sim --workload {}: {}: {}",
        p.sim_workload(),
        m.outcome(),
        m.stderr_tail
    );
    let out: Value = serde_json::from_slice(&m.stdout).context("reading farmem sim's report")?;
    let mut time: HashMap<(String, String), f64> = HashMap::new();
    for r in out["runs"].as_array().into_iter().flatten() {
        if let (Some(s), Some(f), Some(t)) = (
            r["scheme"].as_str(),
            r["overrides"]["link.bw_factor"].as_str(),
            r["sim_time_ns"].as_f64(),
        ) {
            time.insert((s.into(), f.into()), t);
        }
    }
    let mut by_config = Map::new();
    for c in configs {
        let per: Map<String, Value> = POINTS
            .iter()
            .map(|(point, _)| {
                let f = factor(point).to_string();
                let t = |s: &str| time.get(&(s.to_string(), f.clone())).copied();
                let speedup = t("remote").zip(t(c.scheme)).map(|(r, x)| r / x);
                (point.to_string(), json!(speedup))
            })
            .collect();
        by_config.insert(c.name.into(), Value::Object(per));
    }
    Ok(json!({"workload": p.sim_workload(), "scale": SIM_SCALE, "speedup_over_remote": by_config}))
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    })
}

/// Per program, point and config: the median measure of the runs that
/// answered right, and the speedup over `page` at the same point
/// (seconds: page's over its; GETs a second: its over page's), beside
/// the simulator's and, for `daemon`, the paper's.
pub fn table(
    rows: &[Value],
    programs: &[Program],
    configs: &[Config],
    predictions: &Map<String, Value>,
) -> Vec<Value> {
    let of = |p: Program, point: &str, config: &str, get: &dyn Fn(&Value) -> Option<f64>| {
        median(
            rows.iter()
                .filter(|r| {
                    r["program"] == p.name()
                        && r["point"] == point
                        && r["config"] == config
                        && r["outcome"] == "ok"
                })
                .filter_map(get)
                .collect(),
        )
    };
    let measure = |p: Program, point: &str, config: &str| {
        of(p, point, config, &|r| {
            r["measure"].as_f64().or(r["seconds"].as_f64())
        })
    };
    let written_per_fetched =
        |r: &Value| Some(r["bytes_written_back"].as_f64()? / r["bytes_fetched"].as_f64()?);
    let mut out = Vec::new();
    for &p in programs {
        for (point, _) in POINTS {
            let base = measure(p, point, "page");
            for c in configs {
                let m = measure(p, point, c.name);
                let speedup = base
                    .zip(m)
                    .map(|(b, m)| if p.more_is_better() { m / b } else { b / m });
                let paper = PAPER
                    .iter()
                    .find(|(x, _)| *x == point && c.name == "daemon")
                    .map(|(_, s)| *s);
                out.push(json!({
                    "program": p.name(),
                    "point": point,
                    "config": c.name,
                    "measure": m,
                    "remote_fault_us_p99": of(p, point, c.name, &|r| r["remote_fault_us_p99"].as_f64()),
                    "written_per_fetched": of(p, point, c.name, &written_per_fetched),
                    "speedup": speedup,
                    "predicted_speedup": predictions.get(p.name()).unwrap_or(&Value::Null)["speedup_over_remote"][c.name][point],
                    "paper_speedup": paper,
                }));
            }
        }
    }
    out
}

/// The checks that this evaluation measures.
pub fn checks(rows: &[Value], table: &[Value]) -> Map<String, Value> {
    let speedup = |program: &str, point: &str| {
        table
            .iter()
            .find(|r| r["program"] == program && r["point"] == point && r["config"] == "daemon")
            .and_then(|r| r["speedup"].as_f64())
    };
    let mut c = Map::new();
    if table.iter().any(|r| r["config"] == "daemon") {
        if table.iter().any(|r| r["program"] == "pagerank") {
            let s = speedup("pagerank", "1/4");
            c.insert(
                "daemon_1_3x_page_at_quarter_bandwidth_on_pagerank".into(),
                json!({"speedup": s, "pass": s.is_some_and(|s| s >= 1.3)}),
            );
        }
        let full: Map<String, Value> = table
            .iter()
            .filter(|r| r["point"] == "full" && r["config"] == "daemon")
            .map(|r| {
                (
                    r["program"].as_str().unwrap_or("?").into(),
                    r["speedup"].clone(),
                )
            })
            .collect();
        let pass = full.values().all(|s| s.as_f64().is_some_and(|s| s >= 0.95));
        c.insert(
            "daemon_within_5pct_of_page_at_full_bandwidth".into(),
            json!({"speedup": full, "pass": pass}),
        );
    }
    if let Some(p99) = demand_p99_under_write_backs(table) {
        c.insert(
            "daemon_demand_p99_under_write_backs_within_2x_unloaded".into(),
            p99,
        );
    }
    let bad: Vec<Value> = rows
        .iter()
        .filter(|r| r["outcome"] != "ok")
        .map(|r| json!({"program": r["program"], "point": r["point"], "config": r["config"], "outcome": r["outcome"]}))
        .collect();
    c.insert(
        "every_run_answers_as_on_local_memory".into(),
        json!({"bad": bad, "pass": bad.is_empty()}),
    );
    c
}

/// A program writes back heavily when it writes back at least half the
/// bytes it fetches (the demo's PageRank and key/value program both do).
const WRITE_BACK_HEAVY: f64 = 0.5;

/// The tail check: on each write-back-heavy program, the remote
/// fault p99 at 1/4 (write-backs and reads filling the link) over the p99
/// at full (the link unloaded), daemon's judged and page's reported. None
/// without both points under daemon.
fn demand_p99_under_write_backs(table: &[Value]) -> Option<Value> {
    let cell = |program: &Value, point: &str, config: &str, key: &str| {
        table
            .iter()
            .find(|r| r["program"] == *program && r["point"] == point && r["config"] == config)
            .and_then(|r| r[key].as_f64())
    };
    let mut per = Map::new();
    for r in table
        .iter()
        .filter(|r| r["point"] == "full" && r["config"] == "page")
    {
        let p = &r["program"];
        if !cell(p, "full", "page", "written_per_fetched").is_some_and(|w| w >= WRITE_BACK_HEAVY) {
            continue;
        }
        let loaded_over_unloaded = |config: &str| {
            cell(p, "1/4", config, "remote_fault_us_p99")
                .zip(cell(p, "full", config, "remote_fault_us_p99"))
                .map(|(loaded, unloaded)| loaded / unloaded)
        };
        per.insert(
            p.as_str().unwrap_or("?").into(),
            json!({"daemon": loaded_over_unloaded("daemon"), "page": loaded_over_unloaded("page")}),
        );
    }
    let judged: Vec<Option<f64>> = per.values().map(|v| v["daemon"].as_f64()).collect();
    (!judged.is_empty()).then(|| {
        let pass = judged.iter().all(|x| x.is_some_and(|x| x <= 2.0));
        json!({"p99_at_quarter_over_full": per, "pass": pass})
    })
}

/// A table row's cells, for the CSV and the terminal.
const COLUMNS: [&str; 7] = [
    "program",
    "point",
    "config",
    "measure",
    "speedup",
    "predicted_speedup",
    "paper_speedup",
];

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Number(n) => n.as_f64().map_or(n.to_string(), |x| format!("{x:.3}")),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

pub fn print(out: &Value) {
    println!("{}", COLUMNS.join("  "));
    println!(
        "(measure: pagerank and kv seconds, redis GETs/s; speedups over page at the same point)"
    );
    for r in out["table"].as_array().into_iter().flatten() {
        let cells: Vec<String> = COLUMNS.iter().map(|k| cell(&r[*k])).collect();
        println!("{}", cells.join("  "));
    }
    for (k, v) in out["checks"].as_object().into_iter().flatten() {
        let verdict = if v["pass"] == true { "pass" } else { "FAIL" };
        println!("check {k}: {verdict}");
    }
}

/// daemon-real.json, rows.csv, table.csv and daemon-real.svg in `dir`.
pub fn write(dir: &Path, out: &Value) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let put = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    put("daemon-real.json", format!("{out:#}\n"))?;
    let rows = out["rows"].as_array().cloned().unwrap_or_default();
    let keys: Vec<String> = rows
        .iter()
        .flat_map(|r| r.as_object().into_iter().flat_map(|o| o.keys().cloned()))
        .fold(Vec::new(), |mut ks, k| {
            if !ks.contains(&k) && k != "stderr_tail" {
                ks.push(k);
            }
            ks
        });
    let mut csv = keys.join(",") + "\n";
    for r in &rows {
        let cells: Vec<String> = keys.iter().map(|k| cell(&r[k.as_str()])).collect();
        csv += &(cells.join(",") + "\n");
    }
    put("rows.csv", csv)?;
    let table = out["table"].as_array().cloned().unwrap_or_default();
    let mut csv = COLUMNS.join(",") + "\n";
    for r in &table {
        let cells: Vec<String> = COLUMNS.iter().map(|k| cell(&r[*k])).collect();
        csv += &(cells.join(",") + "\n");
    }
    put("table.csv", csv)?;
    let daemon: Vec<&Value> = table.iter().filter(|r| r["config"] == "daemon").collect();
    let series = |name: &str, key: &str| {
        Series::new(
            name,
            daemon
                .iter()
                .map(|r| r[key].as_f64().unwrap_or(0.0))
                .collect(),
        )
    };
    let chart = BarChart {
        title: "DaeMon on the real link: --engine daemon over --engine page".into(),
        y_label: "speedup over page".into(),
        groups: daemon
            .iter()
            .map(|r| format!("{} {}", cell(&r["program"]), cell(&r["point"])))
            .collect(),
        series: vec![
            series("measured", "speedup"),
            series("simulated", "predicted_speedup"),
            series("paper", "paper_speedup"),
        ],
        reference: Some(1.0),
    };
    let path = dir.join("daemon-real.svg");
    figure::write(&path, &chart.to_svg()?).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::eval::daemon_real::plan::CONFIGS;

    fn row(program: &str, point: &str, config: &str, measure: f64) -> Value {
        json!({"program": program, "point": point, "config": config, "outcome": "ok", "measure": measure})
    }

    #[test]
    fn speedups_are_over_page_at_the_same_point_by_medians_of_good_runs() {
        let configs = [CONFIGS[0], CONFIGS[4]];
        let mut rows = vec![
            row("pagerank", "1/4", "page", 4.0),
            row("pagerank", "1/4", "page", 6.0),
            row("pagerank", "1/4", "page", 5.0),
            row("pagerank", "1/4", "daemon", 2.0),
            row("redis", "1/4", "page", 1000.0),
            row("redis", "1/4", "daemon", 1500.0),
        ];
        // A wrong answer is not timed, however fast.
        let mut wrong = row("pagerank", "1/4", "daemon", 0.1);
        wrong["outcome"] = json!("wrong_answer");
        rows.push(wrong);
        let mut pred = Map::new();
        pred.insert(
            "pagerank".into(),
            json!({"speedup_over_remote": {"daemon": {"1/4": 2.5}}}),
        );
        let t = table(&rows, &[Program::PageRank, Program::Redis], &configs, &pred);
        let get = |p: &str, c: &str| {
            t.iter()
                .find(|r| r["program"] == p && r["point"] == "1/4" && r["config"] == c)
                .unwrap()
        };
        let d = get("pagerank", "daemon");
        assert_eq!(d["speedup"], json!(2.5), "page's median 5 s over 2 s");
        assert_eq!(d["predicted_speedup"], json!(2.5));
        assert_eq!(d["paper_speedup"], json!(2.36));
        assert_eq!(get("pagerank", "page")["speedup"], json!(1.0));
        assert_eq!(
            get("redis", "daemon")["speedup"],
            json!(1.5),
            "GETs/s: more is better"
        );
        assert_eq!(get("redis", "daemon")["predicted_speedup"], Value::Null);
        // Tails: daemon's p99 at 1/4 within twice its unloaded one.
        let mut tails = vec![
            json!({"program": "pagerank", "point": "full", "config": "page", "outcome": "ok", "measure": 1.0,
                   "remote_fault_us_p99": 100.0, "bytes_written_back": 60.0, "bytes_fetched": 100.0}),
            json!({"program": "pagerank", "point": "full", "config": "daemon", "outcome": "ok", "measure": 1.0,
                   "remote_fault_us_p99": 100.0}),
        ];
        for r in rows.iter_mut().filter(|r| r["program"] == "pagerank") {
            r["remote_fault_us_p99"] = json!(if r["config"] == "page" { 900.0 } else { 150.0 });
        }
        rows.append(&mut tails);
        let t = table(&rows, &[Program::PageRank, Program::Redis], &configs, &pred);
        let c = checks(&rows, &t);
        let tail = &c["daemon_demand_p99_under_write_backs_within_2x_unloaded"];
        assert_eq!(
            tail["p99_at_quarter_over_full"]["pagerank"]["daemon"],
            json!(1.5)
        );
        assert_eq!(
            tail["p99_at_quarter_over_full"]["pagerank"]["page"],
            json!(9.0)
        );
        assert_eq!(tail["pass"], true);
        assert!(
            tail["p99_at_quarter_over_full"].get("redis").is_none(),
            "redis wrote nothing back here: not judged"
        );
        assert_eq!(
            c["daemon_1_3x_page_at_quarter_bandwidth_on_pagerank"]["pass"],
            true
        );
        // Redis has no run at full: nothing shows daemon within 5% there.
        assert_eq!(
            c["daemon_within_5pct_of_page_at_full_bandwidth"]["pass"],
            false
        );
        assert_eq!(c["every_run_answers_as_on_local_memory"]["pass"], false);
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0]), Some(2.0));
    }
}
