//! The soak's memory nodes and faults: SIGKILL and restart on the same
//! address, or SIGSTOP and SIGCONT, at random (seeded).

use std::process::Child;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::SliceRandom;

use super::Soak;

/// A memory node of the soak.
pub(super) struct Node {
    pub(super) addr: String,
    /// The controller's number for it (what the runtime's messages name).
    pub(super) id: Option<u64>,
    pub(super) child: Option<Child>,
    pub(super) state: NodeState,
    pub(super) starts: u32,
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum NodeState {
    Up,
    /// SIGKILLed; restarted on the same address at the instant.
    Killed(Instant),
    /// SIGSTOPped; SIGCONTed at the instant.
    Stopped(Instant),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    KillRestart,
    StopCont,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::KillRestart => "kill_restart",
            Kind::StopCont => "stop_cont",
        }
    }
}

/// One injected fault.
pub(super) struct Fault {
    pub(super) kind: Kind,
    pub(super) node: usize,
    pub(super) at: Instant,
    /// When the node was back (SIGCONT, or the restarted node serving).
    pub(super) back: Option<Instant>,
}

impl Soak<'_> {
    pub(super) fn inject(&mut self, now: Instant) {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state == NodeState::Up)
            .collect();
        let Some(&node) = up.choose(&mut self.rng) else {
            return;
        };
        let kind = if self.rng.gen_bool(0.5) {
            Kind::KillRestart
        } else {
            Kind::StopCont
        };
        let n = &mut self.nodes[node];
        let pid = n.child.as_ref().map(|c| c.id() as libc::pid_t).unwrap_or(0);
        match kind {
            Kind::KillRestart => {
                let mut child = n.child.take().expect("an up node runs");
                let _ = child.kill();
                let _ = child.wait();
                let after = self.rng.gen_range(2000..=5000);
                n.state = NodeState::Killed(now + Duration::from_millis(after));
            }
            Kind::StopCont => {
                // SAFETY: kill(2) on our own child.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                let after = self.rng.gen_range(1000..=5000);
                n.state = NodeState::Stopped(now + Duration::from_millis(after));
            }
        }
        self.faults.push(Fault {
            kind,
            node,
            at: now,
            back: None,
        });
    }

    /// Brings back the nodes whose fault is over (all of them with `all`).
    pub(super) fn recover(&mut self, now: Instant, all: bool) -> anyhow::Result<()> {
        for i in 0..self.nodes.len() {
            match self.nodes[i].state {
                NodeState::Stopped(t) if all || now >= t => {
                    if let Some(c) = &self.nodes[i].child {
                        // SAFETY: kill(2) on our own child.
                        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGCONT) };
                    }
                }
                NodeState::Killed(t) if all || now >= t => {
                    let addr = self.nodes[i].addr.clone();
                    // The old socket may linger a moment: try for a while.
                    let mut tries = 0;
                    let child = loop {
                        match self.spawn_memnode(i, &addr) {
                            Ok((c, _, id)) => {
                                self.nodes[i].id = id;
                                break c;
                            }
                            Err(_) if tries < 20 => {
                                tries += 1;
                                std::thread::sleep(Duration::from_millis(250));
                            }
                            Err(e) => return Err(e),
                        }
                    };
                    self.nodes[i].child = Some(child);
                    self.nodes[i].starts += 1;
                }
                _ => continue,
            }
            self.nodes[i].state = NodeState::Up;
            let back = Instant::now();
            if let Some(f) = self
                .faults
                .iter_mut()
                .rev()
                .find(|f| f.node == i && f.back.is_none())
            {
                f.back = Some(back);
            }
        }
        Ok(())
    }
}
