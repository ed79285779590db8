//! `--config FILE` for the daemons: a TOML file whose keys are the
//! command's own flags (`listen = "0.0.0.0:7001"`, `capacity = "64GiB"`,
//! `heartbeat-ms = 500`, `json = true`), read before the command line is
//! parsed and turned into those flags, so a file and a command line mean
//! the same thing and are checked by the same parser. A flag given on the
//! command line wins over the file's key.

use std::ffi::OsString;
use std::path::Path;

use anyhow::Context;

/// Commands that take `--config`.
const TAKES_CONFIG: [&str; 2] = ["controller", "memnode"];

/// `argv` with the keys of its `--config FILE` (if the command takes one)
/// inserted as flags before the command line's own; `flags` names the
/// command's long flags, for checking the file's keys.
pub fn expand(
    argv: Vec<OsString>,
    flags: impl Fn(&str) -> Vec<String>,
) -> anyhow::Result<Vec<OsString>> {
    let words: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some(at) = words
        .iter()
        .skip(1)
        .position(|w| !w.starts_with('-'))
        .map(|i| i + 1)
    else {
        return Ok(argv);
    };
    if !TAKES_CONFIG.contains(&words[at].as_str()) {
        return Ok(argv);
    }
    let command = &words[at];
    let rest = &words[at + 1..];
    let file = rest
        .iter()
        .enumerate()
        .find_map(|(i, w)| match w.strip_prefix("--config") {
            Some("") => rest.get(i + 1).cloned(),
            Some(v) => v.strip_prefix('=').map(str::to_string),
            None => None,
        });
    let Some(file) = file else {
        return Ok(argv);
    };
    let given: Vec<&str> = rest
        .iter()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.split('=').next().unwrap_or(w))
        .collect();
    let from_file = flags_of(Path::new(&file), command, &flags(command), &given)?;
    let mut out = argv[..=at].to_vec();
    out.extend(from_file.into_iter().map(OsString::from));
    out.extend_from_slice(&argv[at + 1..]);
    Ok(out)
}

/// The flags the file's keys stand for, but those `given` already.
fn flags_of(
    file: &Path,
    command: &str,
    known: &[String],
    given: &[&str],
) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading --config {}", file.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("--config {}", file.display()))?;
    let mut out = Vec::new();
    for (key, value) in table {
        if key == "config" || !known.contains(&key) {
            anyhow::bail!(
                "--config {}: `{key}` is not a flag of farmem {command} (its keys are its flags: {})",
                file.display(),
                known
                    .iter()
                    .filter(|k| *k != "config" && *k != "help" && *k != "version")
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if given.contains(&key.as_str()) {
            continue;
        }
        let flag = format!("--{key}");
        match value {
            toml::Value::Boolean(true) => out.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::String(s) => out.extend([flag, s]),
            toml::Value::Integer(n) => out.extend([flag, n.to_string()]),
            toml::Value::Float(x) => out.extend([flag, x.to_string()]),
            other => anyhow::bail!(
                "--config {}: `{key}` is a {}; give a string, a number or true",
                file.display(),
                other.type_str()
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(_: &str) -> Vec<String> {
        [
            "listen",
            "capacity",
            "heartbeat-ms",
            "json",
            "config",
            "help",
        ]
        .map(String::from)
        .to_vec()
    }

    fn run(file_text: &str, args: &[&str]) -> anyhow::Result<Vec<String>> {
        let file = std::env::temp_dir().join(format!("farmem-config-test-{}.toml", rand_suffix()));
        std::fs::write(&file, file_text).unwrap();
        let mut argv: Vec<OsString> = vec!["farmem".into(), "-v".into()];
        for a in args {
            argv.push(a.replace("FILE", file.to_str().unwrap()).into());
        }
        let out = expand(argv, flags);
        let _ = std::fs::remove_file(&file);
        Ok(out?
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect())
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        u64::from(std::process::id()) << 20 | N.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn keys_become_flags_and_the_command_line_wins() {
        let toml =
            "listen = \"0.0.0.0:7001\"\ncapacity = \"64GiB\"\nheartbeat-ms = 250\njson = true\n";
        let out = run(toml, &["memnode", "--config", "FILE", "--capacity", "1GiB"]).unwrap();
        let i = out.iter().position(|a| a == "memnode").unwrap();
        let flags: Vec<&str> = out[i + 1..].iter().map(String::as_str).collect();
        assert!(
            flags.windows(2).any(|w| w == ["--listen", "0.0.0.0:7001"]),
            "{flags:?}"
        );
        assert!(
            flags.windows(2).any(|w| w == ["--heartbeat-ms", "250"]),
            "{flags:?}"
        );
        assert!(flags.contains(&"--json"));
        // One --capacity: the command line's.
        assert_eq!(
            flags.iter().filter(|f| **f == "--capacity").count(),
            1,
            "{flags:?}"
        );
        assert!(
            flags.windows(2).any(|w| w == ["--capacity", "1GiB"]),
            "{flags:?}"
        );
        // `--config=FILE` is read the same way.
        let out = run("json = false\n", &["controller", "--config=FILE"]).unwrap();
        assert!(!out.contains(&"--json".to_string()), "{out:?}");
    }

    #[test]
    fn an_unknown_key_or_a_table_is_refused_naming_the_file_and_the_keys() {
        let err = run("lsten = \"x\"\n", &["memnode", "--config", "FILE"]).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("`lsten` is not a flag of farmem memnode"),
            "{msg}"
        );
        assert!(msg.contains("listen, capacity"), "{msg}");
        let err = run("[listen]\nx = 1\n", &["memnode", "--config", "FILE"]).unwrap_err();
        assert!(format!("{err:#}").contains("is a table"), "{err:#}");
        let err = run("listen = \n", &["memnode", "--config", "FILE"]).unwrap_err();
        assert!(format!("{err:#}").contains("--config"), "{err:#}");
        // Other commands, and no --config: untouched.
        assert_eq!(
            run("", &["status", "--config", "FILE"]).unwrap()[2],
            "status"
        );
    }
}
