//! The soak's faults, at random (seeded): a memory node SIGKILLed and
//! restarted on the same address, or SIGSTOPped and SIGCONTed; with
//! several controllers, the leader SIGKILLed and restarted on its address.
//! At a leader kill a short program (a probe) starts: when its first
//! progress arrives tells how soon new runs start during the takeover.

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
    /// The leading controller SIGKILLed (`Fault::node` is its index).
    LeaderKill,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::KillRestart => "kill_restart",
            Kind::StopCont => "stop_cont",
            Kind::LeaderKill => "leader_kill",
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
    /// A leader kill: when another controller was seen leading.
    pub(super) takeover: Option<Instant>,
    /// A leader kill: the program started at it.
    pub(super) probe: Option<u64>,
}

/// Chance that a fault after the first is a leader kill, with several
/// controllers.
const LEADER_KILL_CHANCE: f64 = 0.25;

impl Soak<'_> {
    /// True when a leader may be killed now: several controllers, all up.
    pub(super) fn can_kill_leader(&mut self) -> bool {
        self.ctl_down.is_none() && self.awaiting_takeover.is_none() && self.rack.elected().is_some()
    }

    /// Injects one fault: the leader's kill now and then, when it may be
    /// killed, else one on a memory node if `node_may_fail`.
    pub(super) fn inject(
        &mut self,
        now: Instant,
        node_may_fail: bool,
        deadline: Instant,
    ) -> anyhow::Result<()> {
        // The first fault kills the leader, so even a short soak has one.
        let first = !self.faults.iter().any(|x| x.kind == Kind::LeaderKill);
        let leader = !node_may_fail || first || self.rng.gen_bool(LEADER_KILL_CHANCE);
        if self.can_kill_leader() && leader {
            return self.kill_leader(now, deadline);
        }
        if node_may_fail {
            self.inject_node(now);
        }
        Ok(())
    }

    fn kill_leader(&mut self, now: Instant, deadline: Instant) -> anyhow::Result<()> {
        let Some(rack) = self.rack.elected() else {
            return Ok(());
        };
        let Some(leader) = rack.leader() else {
            return Ok(());
        };
        rack.kill(leader);
        let at = Instant::now();
        let after = self.rng.gen_range(2000..=5000);
        self.ctl_down = Some((leader, now + Duration::from_millis(after)));
        let probe = self.next_id;
        self.spawn_program(deadline.max(at + Duration::from_secs(10)), true)?;
        self.awaiting_takeover = Some(self.faults.len());
        self.faults.push(Fault {
            kind: Kind::LeaderKill,
            node: leader,
            at,
            back: None,
            takeover: None,
            probe: Some(probe),
        });
        Ok(())
    }

    /// Notes when a controller leads again after a leader kill (another
    /// one, or the killed one if restarted first and elected).
    pub(super) fn watch_takeover(&mut self, now: Instant) {
        let Some(i) = self.awaiting_takeover else {
            return;
        };
        let Some(rack) = self.rack.elected() else {
            return;
        };
        if rack.leader().is_some() {
            self.faults[i].takeover = Some(now);
            self.awaiting_takeover = None;
        }
    }

    fn inject_node(&mut self, now: Instant) {
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
            Kind::StopCont | Kind::LeaderKill => {
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
            takeover: None,
            probe: None,
        });
    }

    /// Restarts the killed controller once due (at once with `all`).
    fn recover_controller(&mut self, now: Instant, all: bool) -> anyhow::Result<()> {
        let Some((i, t)) = self.ctl_down else {
            return Ok(());
        };
        if !all && now < t {
            return Ok(());
        }
        let Some(rack) = self.rack.elected() else {
            return Ok(());
        };
        // The old socket may linger a moment: try for a while.
        let mut tries = 0;
        while let Err(e) = rack.spawn(i) {
            if tries >= 20 {
                return Err(e);
            }
            tries += 1;
            std::thread::sleep(Duration::from_millis(250));
        }
        debug_assert!(rack.running(i));
        self.ctl_down = None;
        let back = Instant::now();
        if let Some(f) = self
            .faults
            .iter_mut()
            .rev()
            .find(|f| f.kind == Kind::LeaderKill && f.node == i && f.back.is_none())
        {
            f.back = Some(back);
        }
        Ok(())
    }

    /// Brings back the nodes whose fault is over (all of them with `all`).
    pub(super) fn recover(&mut self, now: Instant, all: bool) -> anyhow::Result<()> {
        self.recover_controller(now, all)?;
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
                .find(|f| f.kind != Kind::LeaderKill && f.node == i && f.back.is_none())
            {
                f.back = Some(back);
            }
        }
        Ok(())
    }
}
