//! `farmem bench swap`'s configs and their order: which ways of running
//! the program, in which order each round, at how much local memory.

use anyhow::{Context, bail};
use farmem_core::{ByteSize, Ratio};

use super::kernel_swap::Backing;

/// One way of running the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Config {
    /// No limit.
    Local,
    /// A cgroup v1 limit and a kernel swap backing.
    Kernel(Backing),
    /// `farmem run --local-mem X --backend B`.
    Farmem(FarBackend),
}

/// The `farmem run --backend` a farmem config runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FarBackend {
    Remote,
    Compressed,
    Auto,
    /// A file in the directory the kernel's swap file goes in.
    File,
}

impl FarBackend {
    /// The `--backend` value; a file goes in `swap_dir`.
    pub fn arg(self, swap_dir: &std::path::Path) -> String {
        match self {
            FarBackend::Remote => "remote".into(),
            FarBackend::Compressed => "compressed".into(),
            FarBackend::Auto => "auto".into(),
            FarBackend::File => format!("file:{}", swap_dir.display()),
        }
    }
}

impl Config {
    pub fn name(self) -> &'static str {
        match self {
            Config::Local => "local",
            Config::Kernel(b) => b.name(),
            Config::Farmem(FarBackend::Remote) => "farmem",
            Config::Farmem(FarBackend::Compressed) => "farmem-compressed",
            Config::Farmem(FarBackend::Auto) => "farmem-auto",
            Config::Farmem(FarBackend::File) => "farmem-file",
        }
    }
}

/// The configs in `s`, local first (its first run measures the footprint
/// the others' limit is a share of).
pub fn parse_configs(s: &str) -> anyhow::Result<Vec<Config>> {
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let c = match name {
            "local" => Config::Local,
            "swapfile" => Config::Kernel(Backing::Swapfile),
            "zram" => Config::Kernel(Backing::Zram),
            "zswap" => Config::Kernel(Backing::Zswap),
            "farmem" => Config::Farmem(FarBackend::Remote),
            "farmem-compressed" => Config::Farmem(FarBackend::Compressed),
            "farmem-auto" => Config::Farmem(FarBackend::Auto),
            "farmem-file" => Config::Farmem(FarBackend::File),
            _ => bail!(
                "--configs: unknown config `{name}` (local, swapfile, zram, zswap, farmem, farmem-compressed, farmem-auto, farmem-file)"
            ),
        };
        anyhow::ensure!(!out.contains(&c), "--configs: `{name}` given twice");
        out.push(c);
    }
    anyhow::ensure!(!out.is_empty(), "--configs: none given");
    out.sort_by_key(|c| *c != Config::Local);
    Ok(out)
}

/// The order of each round: the configs rotated by one more each round,
/// so none always runs first (or right after the same one).
pub fn plan(configs: &[Config], rounds: u32) -> Vec<Vec<Config>> {
    (0..rounds as usize)
        .map(|r| {
            let mut order = configs.to_vec();
            order.rotate_left(r % configs.len().max(1));
            order
        })
        .collect()
}

/// Local memory of the limited configs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LocalMem {
    Share(f64),
    Bytes(u64),
}

impl LocalMem {
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        if let Ok(b) = s.parse::<ByteSize>() {
            anyhow::ensure!(b.bytes() > 0, "--local must be positive");
            return Ok(Self::Bytes(b.bytes()));
        }
        let r: Ratio = s
            .parse()
            .with_context(|| format!("--local {s}: expected a share (25%) or a size (256MiB)"))?;
        anyhow::ensure!(r.get() > 0.0, "--local {s}: a share must be above 0");
        Ok(Self::Share(r.get()))
    }

    /// The bytes for a program of `footprint`, in whole MiB (at least 16
    /// MiB for a share, as the demo does).
    pub fn bytes(self, footprint: u64) -> u64 {
        match self {
            Self::Bytes(b) => b.div_ceil(1 << 20) << 20,
            Self::Share(s) => {
                (((footprint as f64 * s) as u64).max(16 << 20)).div_ceil(1 << 20) << 20
            }
        }
    }
}

/// Room for the swapped pages: the whole footprint and some.
pub fn swap_bytes(footprint: u64) -> u64 {
    (footprint + (256 << 20)).div_ceil(1 << 20) << 20
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_with_local_first() {
        let c = parse_configs("zswap, farmem,local").unwrap();
        assert_eq!(
            c,
            vec![
                Config::Local,
                Config::Kernel(Backing::Zswap),
                Config::Farmem(FarBackend::Remote)
            ]
        );
        assert_eq!(
            parse_configs(
                "local,swapfile,zram,zswap,farmem,farmem-compressed,farmem-auto,farmem-file"
            )
            .unwrap()
            .len(),
            8
        );
        assert!(parse_configs("swap").is_err());
        assert!(parse_configs("local,local").is_err());
        assert!(parse_configs(" , ").is_err());
    }

    #[test]
    fn every_round_runs_every_config_in_a_new_order() {
        let c = parse_configs("local,swapfile,zram,farmem").unwrap();
        let p = plan(&c, 5);
        assert_eq!(p.len(), 5);
        for round in &p {
            let mut names: Vec<_> = round.iter().map(|c| c.name()).collect();
            names.sort();
            assert_eq!(names, ["farmem", "local", "swapfile", "zram"]);
        }
        assert_eq!(p[0][0], Config::Local);
        let firsts: Vec<_> = p.iter().take(4).map(|r| r[0]).collect();
        assert_eq!(firsts, c);
        assert_eq!(p[4], p[0]);
        assert!(plan(&c, 0).is_empty());
    }

    #[test]
    fn local_memory_is_a_share_of_the_footprint_or_a_size() {
        let share = LocalMem::parse("25%").unwrap();
        assert_eq!(share, LocalMem::Share(0.25));
        assert_eq!(share.bytes(1 << 30), 256 << 20);
        // Rounded up to whole MiB, and never below 16 MiB.
        assert_eq!(share.bytes((1 << 30) + 5), (256 << 20) + (1 << 20));
        assert_eq!(share.bytes(1 << 20), 16 << 20);
        assert_eq!(LocalMem::parse("256MiB").unwrap().bytes(0), 256 << 20);
        assert!(LocalMem::parse("0%").is_err());
        assert!(LocalMem::parse("0").is_err());
        assert!(LocalMem::parse("150%").is_err());
        assert!(LocalMem::parse("lots").is_err());
    }

    #[test]
    fn swap_holds_the_whole_footprint() {
        assert!(swap_bytes(1 << 30) >= 1 << 30);
        assert_eq!(swap_bytes(0) % (1 << 20), 0);
    }
}
