//! libfarmem through its C header only: the C suite (tests/c/umap_suite.c)
//! and a UMap program (tests/c/umap_sort.c) built the way a user builds
//! one, against an install made by scripts/install-libfarmem and found
//! with pkg-config.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// libfarmem.so of this build's profile, built now: `cargo test` builds
/// the library for the tests to link against but leaves no `.so` where a
/// C program's `-L` finds it, so a stale one could be tested instead.
fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            // target/<profile>/deps/<test>
            let profile_dir = exe.parent().and_then(Path::parent).unwrap();
            let target = profile_dir.parent().unwrap();
            let mut cargo = Command::new(env!("CARGO"));
            cargo
                .args(["build", "--quiet", "-p", "farmem-umap", "--target-dir"])
                .arg(target);
            if profile_dir.file_name().is_some_and(|p| p == "release") {
                cargo.arg("--release");
            }
            ok("cargo build -p farmem-umap", cargo.output().unwrap());
            assert!(profile_dir.join("libfarmem.so").is_file());
            profile_dir.to_path_buf()
        })
        .clone()
}

/// The path of `program`, or None (a skip) when it is not installed;
/// scripts/test installs it and sets FARMEM_TEST_REQUIRE_PROGRAMS, so
/// there a missing one fails instead.
fn installed(program: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("FARMEM_TEST_REQUIRE_PROGRAMS").is_none(),
            "{program} is not installed (scripts/test installs it)"
        );
        eprintln!("skipping: {program} is not installed");
    }
    found
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("farmem-umap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(what: &str, out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Compiles `source` with only the header's directory and libfarmem.
fn build(source: &str, dir: &Path) -> Option<PathBuf> {
    let cc = installed("cc")?;
    let lib = lib_dir();
    let exe = dir.join(source.trim_end_matches(".c"));
    let out = Command::new(cc)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("tests/c").join(source))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lfarmem", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    ok(&format!("compiling {source}"), out);
    Some(exe)
}

#[test]
fn the_c_suite_passes_over_a_file_twice_the_buffer() {
    let dir = scratch("suite");
    let Some(suite) = build("umap_suite.c", &dir) else {
        return;
    };
    // 512 pages of file through 256 pages of buffer: every test pages.
    let out = Command::new(&suite)
        .arg(dir.join("data"))
        .arg("512")
        .env("UMAP_BUFSIZE", "256")
        .env("UMAP_READ_AHEAD", "4")
        .output()
        .unwrap();
    let stdout = ok("the C suite", out);
    assert_eq!(stdout.matches("PASS ").count(), 10, "{stdout}");
    assert!(stdout.ends_with("all passed\n"), "{stdout}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_umap_program_builds_with_pkg_config_and_sorts_a_file_in_place() {
    let dir = scratch("sort");
    let (Some(cc), Some(pkg_config)) = (installed("cc"), installed("pkg-config")) else {
        return;
    };
    let prefix = dir.join("prefix");
    let install = crate_dir().join("../../scripts/install-libfarmem");
    let out = Command::new(install)
        .arg(&prefix)
        .env("FARMEM_LIB_DIR", lib_dir())
        .output()
        .unwrap();
    ok("scripts/install-libfarmem", out);
    assert!(prefix.join("include/umap/umap.h").is_file());

    let pc_path = prefix.join("lib/pkgconfig");
    let flags = ok(
        "pkg-config",
        Command::new(pkg_config)
            .args(["--cflags", "--libs", "farmem"])
            .env("PKG_CONFIG_PATH", &pc_path)
            .output()
            .unwrap(),
    );
    let exe = dir.join("umap_sort");
    let out = Command::new(cc)
        .arg(crate_dir().join("tests/c/umap_sort.c"))
        .args(flags.split_whitespace())
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    ok("cc umap_sort.c $(pkg-config --cflags --libs farmem)", out);

    // 8 MiB of keys through a 1 MiB buffer.
    let run = |bufsize: &str| {
        Command::new(&exe)
            .arg(dir.join("keys"))
            .arg("1048576")
            .env("LD_LIBRARY_PATH", prefix.join("lib"))
            .env("UMAP_BUFSIZE", bufsize)
            .output()
            .unwrap()
    };
    let stdout = ok("umap_sort", run("256"));
    assert!(
        stdout.starts_with("sorted 1048576 keys in place"),
        "{stdout}"
    );

    // A variable that does not parse stops umap with its name.
    let out = run("lots");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("UMAP_BUFSIZE=lots: not a whole number"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A controller and a memory node in this process, on loopback.
struct Rack {
    controller: farmem_controller::Controller,
    _node: farmem_memnode::MemNode,
}

fn rack() -> Rack {
    use farmem_controller::{Controller, ControllerConfig};
    use farmem_memnode::{MemNode, MemNodeConfig};
    let mut cfg = ControllerConfig::new("127.0.0.1:0");
    cfg.granularity = 16 << 20;
    let controller = Controller::start(cfg).unwrap();
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap().to_string();
    drop(probe);
    let mut m = MemNodeConfig::new(addr, 1 << 30);
    m.controller = Some(controller.local_addr().to_string());
    let node = MemNode::start(m).unwrap();
    Rack {
        controller,
        _node: node,
    }
}

#[test]
fn far_memory_on_the_rack_through_umap_anonymous() {
    let dir = scratch("far");
    let Some(far) = build("umap_far.c", &dir) else {
        return;
    };
    let rack = rack();
    // 2048 pages of far memory through a 256-page buffer.
    let run = |controller: Option<String>| {
        let mut cmd = Command::new(&far);
        cmd.arg("2048").env("UMAP_BUFSIZE", "256");
        if let Some(c) = controller {
            cmd.env("FARMEM_CONTROLLER", c);
        }
        cmd.output().unwrap()
    };
    let stdout = ok(
        "umap_far",
        run(Some(rack.controller.local_addr().to_string())),
    );
    assert_eq!(stdout, format!("far: {} words verified\n", 2048 * 512));

    // Without a rack, far memory is refused by name.
    let out = run(None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("far memory needs a rack: FARMEM_CONTROLLER is not set"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
