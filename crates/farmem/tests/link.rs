//! A named link shared by programs (`farmem run --link`, ThymesisFlow's
//! MCBN) and changed by `farmem link`: the requests of every program on it
//! pass one gate, and bad names and models are refused by name.

use std::process::{Command, Output, Stdio};

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

fn userfaultfd_missing() -> bool {
    !std::path::Path::new("/proc/sys/vm/unprivileged_userfaultfd").exists()
}

/// A link name of this test process, removed when dropped.
struct TestLink(String);

impl TestLink {
    fn new(test: &str) -> Self {
        Self(format!("t-{test}-{}", std::process::id()))
    }
}

impl Drop for TestLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(format!("/dev/shm/farmem-link-{}", self.0));
    }
}

/// The demo worker's checksum.
fn checksum(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("result "))
        .find_map(|r| serde_json::from_str::<serde_json::Value>(r).ok())
        .and_then(|r| r["checksum"].as_str().map(str::to_string))
        .expect("the worker prints its result")
}

fn link(args: &[&str]) -> Output {
    farmem().arg("link").args(args).output().unwrap()
}

fn shown(name: &str) -> serde_json::Value {
    let out = link(&["show", name, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A scan of 8 MiB at 4 MiB local under `farmem run --link name`.
fn scan_on(name: &str, delay: Option<&str>) -> std::process::Child {
    let mut cmd = farmem();
    cmd.args(["run", "--local-mem", "4MiB", "--link", name]);
    if let Some(d) = delay {
        cmd.args(["--delay", d]);
    }
    cmd.arg("--")
        .arg(env!("CARGO_BIN_EXE_farmem"))
        .args([
            "demo",
            "--worker",
            "--kind",
            "scan",
            "--size",
            "8MiB",
            "--iterations",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn programs_on_one_link_pass_one_gate_and_keep_its_delay() {
    if userfaultfd_missing() {
        eprintln!("skipping: no userfaultfd");
        return;
    }
    let l = TestLink::new("shared");
    // The first program makes the link with its delay; the second joins
    // it without one, and must leave the delay as it is.
    let first = scan_on(&l.0, Some("2us")).wait_with_output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let after_one = shown(&l.0);
    assert_eq!(after_one["delay"], "2us");
    let one = after_one["requests"].as_u64().unwrap();
    assert!(one > 0, "the program's requests passed the link's gate");

    let (a, b) = (scan_on(&l.0, None), scan_on(&l.0, None));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for out in [&a, &b] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        checksum(&a),
        checksum(&first),
        "the same answer on the shared link"
    );
    assert_eq!(checksum(&b), checksum(&first));
    let after_three = shown(&l.0);
    assert_eq!(
        after_three["delay"], "2us",
        "a program joining kept the delay"
    );
    assert!(
        after_three["requests"].as_u64().unwrap() > one,
        "both programs' requests were counted at the one gate"
    );
}

#[test]
fn link_commands_name_what_is_wrong() {
    let l = TestLink::new("cmds");
    let missing = link(&["show", &l.0]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no link"));

    let bad = link(&["set", "a/b", "--delay", "5us"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad link name"));

    // A step model cannot be shared, and refusing it makes nothing.
    let steps = link(&["set", &l.0, "--delay", "steps:0=0,1s=5us"]);
    assert!(!steps.status.success());
    assert!(String::from_utf8_lossy(&steps.stderr).contains("farmem link set"));
    assert!(!link(&["show", &l.0]).status.success());

    assert!(link(&["set", &l.0, "--delay", "50us"]).status.success());
    assert_eq!(shown(&l.0)["delay"], "50us");
    assert!(
        link(&["set", &l.0, "--delay", "rate:100MiB/s"])
            .status
            .success()
    );
    assert_eq!(shown(&l.0)["delay"], "rate:104857600/s");
    assert!(link(&["remove", &l.0]).status.success());
    assert!(!link(&["show", &l.0]).status.success(), "removed");

    // A page that is not a set-up link is named, and can be removed.
    let path = format!("/dev/shm/farmem-link-{}", l.0);
    std::fs::write(&path, vec![0u8; 4096]).unwrap();
    let half = link(&["show", &l.0]);
    assert!(String::from_utf8_lossy(&half.stderr).contains("not a farmem link"));
    assert!(link(&["remove", &l.0]).status.success());
    assert!(!std::path::Path::new(&path).exists());
}

#[test]
fn remote_faults_are_counted_by_the_delay_in_force_when_it_changes_live() {
    if userfaultfd_missing() {
        eprintln!("skipping: no userfaultfd");
        return;
    }
    let l = TestLink::new("by-delay");
    let stats = std::env::temp_dir().join(format!("{}.stats.json", l.0));
    let run = farmem()
        .args(["run", "--local-mem", "4MiB", "--link", &l.0])
        .args(["--delay", "none", "--stats-json"])
        .arg(&stats)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_farmem"))
        .args(["demo", "--worker", "--kind", "scan", "--size", "16MiB"])
        .args(["--iterations", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run makes the link; then its delay flips every 2 ms until the
    // program ends.
    let link = loop {
        match farmem_net::link::SharedLink::open(&l.0) {
            Ok(link) => break link,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    };
    let delays = [
        farmem_policy::delay::DelayModel::Period { gap_ns: 2_000 },
        farmem_policy::delay::DelayModel::None,
    ];
    let ended = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            for d in delays.iter().cycle() {
                if ended.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                link.set(d).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        let out = run.wait_with_output().unwrap();
        ended.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let s = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["stats"])
        .max_by_key(|s| s["remote_fault_latency"]["count"].as_u64())
        .unwrap();
    // Every remote fault under the one delay in force when it ended.
    let by = s["remote_fault_latency_by_delay"].as_object().unwrap();
    let count = |k: &str| by.get(k).and_then(|h| h["count"].as_u64()).unwrap_or(0);
    assert!(count("none") > 0 && count("2us") > 0, "{by:?}");
    assert_eq!(by.len(), 2, "{by:?}");
    assert_eq!(
        count("none") + count("2us"),
        s["remote_fault_latency"]["count"].as_u64().unwrap()
    );
}
