//! A batch of programs through Algorithm 1's loop: in their order, each
//! starts once an instance can take it and its backend has room for its
//! far memory; what it reserved comes back when it ends.
//!
//! The same loop runs the baselines: [`Assignment::Static`] gives every
//! program one backend, so a batch and its baselines differ only in the
//! choice of backend and parameters, never in the queue or the room.

use super::{BackendKind, Features, Instance, Params, Placement, Pressure, SelectConfig, place};

/// How each program's backend is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Assignment {
    /// Algorithm 1: each program's backend and parameters from its
    /// features and the pressure.
    Dispatch(SelectConfig),
    /// One backend for every program, with the default parameters.
    Static(BackendKind),
}

/// A program that starts now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Start {
    /// Its index in the batch.
    pub job: usize,
    /// The instance that runs it.
    pub instance: usize,
    pub backend: BackendKind,
    /// None under [`Assignment::Static`]: the defaults.
    pub params: Option<Params>,
    /// Algorithm 1's branch that found the instance.
    pub placement: Placement,
}

/// A batch that could never finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("a batch needs at least one instance")]
    NoInstances,
    #[error(
        "job {job} needs {bytes} bytes of far memory, more than any backend it may use has in all"
    )]
    NeverFits { job: usize, bytes: u64 },
}

/// The batch's state: who waits, who runs where, what room is left.
#[derive(Debug, Clone)]
pub struct Batch {
    assignment: Assignment,
    jobs: Vec<Features>,
    /// Jobs not started, in the batch's order.
    pending: Vec<usize>,
    /// (job, instance, backend) of the jobs running.
    running: Vec<(usize, usize, BackendKind)>,
    instances: Vec<Instance>,
    max_instances: usize,
    pressure: Pressure,
}

impl Batch {
    /// A batch of `jobs` (each one's features; `far_bytes` is what it
    /// reserves) on at most `max_instances` instances running one program
    /// each, with the room of `capacity` (all of it free).
    pub fn new(
        assignment: Assignment,
        jobs: Vec<Features>,
        capacity: Pressure,
        max_instances: usize,
    ) -> Result<Self, BatchError> {
        if max_instances == 0 {
            return Err(BatchError::NoInstances);
        }
        let batch = Self {
            assignment,
            pending: (0..jobs.len()).collect(),
            jobs,
            running: Vec::new(),
            instances: Vec::new(),
            max_instances,
            pressure: capacity,
        };
        // With everything free, every job must find a backend.
        if let Some(job) = batch
            .pending
            .iter()
            .copied()
            .find(|&j| batch.choose(&batch.jobs[j]).is_none())
        {
            return Err(BatchError::NeverFits {
                job,
                bytes: batch.jobs[job].far_bytes,
            });
        }
        Ok(batch)
    }

    /// The next job that can start now, reserved and marked running; None
    /// when none can until one ends. Jobs start in the batch's order, but
    /// one whose backend is full lets a later one by.
    pub fn start_next(&mut self) -> Option<Start> {
        let can_create = self.instances.len() < self.max_instances;
        for pos in 0..self.pending.len() {
            let job = self.pending[pos];
            let f = self.jobs[job];
            let Some(backend) = self.choose(&f) else {
                continue;
            };
            let placement = place(backend, &self.instances, can_create);
            let instance = match placement {
                Placement::Online(i) | Placement::Free(i) | Placement::Switch(i) => i,
                Placement::Create => {
                    self.instances.push(Instance {
                        backend,
                        running: 0,
                        slots: 1,
                    });
                    self.instances.len() - 1
                }
                // No instance takes anything: no later job can start either.
                Placement::Wait => return None,
            };
            let inst = &mut self.instances[instance];
            inst.backend = backend;
            inst.running += 1;
            *self.free_mut(backend) -= f.far_bytes;
            self.pending.remove(pos);
            self.running.push((job, instance, backend));
            let params = match self.assignment {
                Assignment::Dispatch(cfg) => Some(cfg.params(&f)),
                Assignment::Static(_) => None,
            };
            return Some(Start {
                job,
                instance,
                backend,
                params,
                placement,
            });
        }
        None
    }

    /// `job` ended: its instance and its room are free again. False when
    /// it was not running.
    pub fn finished(&mut self, job: usize) -> bool {
        let Some(pos) = self.running.iter().position(|r| r.0 == job) else {
            return false;
        };
        let (_, instance, backend) = self.running.remove(pos);
        self.instances[instance].running -= 1;
        *self.free_mut(backend) += self.jobs[job].far_bytes;
        true
    }

    /// Every job has run.
    pub fn done(&self) -> bool {
        self.pending.is_empty() && self.running.is_empty()
    }

    /// The room left now.
    pub fn pressure(&self) -> Pressure {
        self.pressure
    }

    fn choose(&self, f: &Features) -> Option<BackendKind> {
        match self.assignment {
            Assignment::Dispatch(cfg) => cfg.select(f, &self.pressure),
            Assignment::Static(b) => self.pressure.fits_now(b, f.far_bytes).then_some(b),
        }
    }

    fn free_mut(&mut self, backend: BackendKind) -> &mut u64 {
        match backend {
            BackendKind::File => &mut self.pressure.file.free,
            BackendKind::Remote | BackendKind::Compressed | BackendKind::Auto => {
                &mut self.pressure.rack.free
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Room;
    use super::*;
    use BackendKind::*;

    const MIB: u64 = 1 << 20;

    fn job(reuse: f64, sequential: f64, far_mib: u64) -> Features {
        Features {
            reuse,
            compressible: 0.5,
            sequential,
            far_bytes: far_mib * MIB,
        }
    }

    /// Two hot jobs, two random ones, two streams; the rack holds one job.
    fn mixed() -> Vec<Features> {
        vec![
            job(1.0, 0.1, 300),
            job(0.0, 0.1, 300),
            job(0.0, 0.95, 300),
            job(1.0, 0.1, 300),
            job(0.0, 0.1, 300),
            job(0.0, 0.95, 300),
        ]
    }

    fn capacity(rack_mib: u64, file_mib: u64) -> Pressure {
        Pressure {
            rack: Room::empty(rack_mib * MIB),
            file: Room::empty(file_mib * MIB),
        }
    }

    /// Runs the batch to the end, always ending the oldest running job
    /// first; returns the starts in order.
    fn drain(batch: &mut Batch) -> Vec<Start> {
        let mut starts = Vec::new();
        let mut running = std::collections::VecDeque::new();
        while !batch.done() {
            while let Some(s) = batch.start_next() {
                running.push_back(s.job);
                starts.push(s);
            }
            let job = running
                .pop_front()
                .expect("a job runs while the batch is not done");
            assert!(batch.finished(job));
        }
        starts
    }

    #[test]
    fn the_dispatcher_runs_streams_on_a_file_beside_the_rack_jobs() {
        let cfg = SelectConfig::default();
        let mut b =
            Batch::new(Assignment::Dispatch(cfg), mixed(), capacity(400, 10_000), 2).unwrap();
        let s = drain(&mut b);
        let order: Vec<_> = s.iter().map(|s| (s.job, s.backend)).collect();
        // Job 1 (random) waits for the rack job 0 holds; the stream goes by.
        assert_eq!(
            order,
            [
                (0, Compressed),
                (2, File),
                (1, Remote),
                (5, File),
                (3, Compressed),
                (4, Remote)
            ]
        );
        assert!(s.iter().all(|s| s.params.is_some()));
        assert_eq!(s[0].placement, Placement::Create);
        assert_eq!(s[1].placement, Placement::Create);
        // Rooms all given back.
        assert_eq!(b.pressure(), capacity(400, 10_000));
    }

    #[test]
    fn a_static_assignment_queues_on_its_one_backend() {
        let mut b = Batch::new(
            Assignment::Static(Remote),
            mixed(),
            capacity(400, 10_000),
            2,
        )
        .unwrap();
        assert_eq!(
            b.start_next().map(|s| (s.job, s.backend)),
            Some((0, Remote))
        );
        // The rack is full: the free instance stays idle.
        assert_eq!(b.start_next(), None);
        assert!(b.finished(0));
        assert!(!b.finished(0));
        let s = b.start_next().unwrap();
        assert_eq!(
            (s.job, s.params, s.placement),
            (1, None, Placement::Free(0))
        );
        b.finished(1);
        let all = drain(&mut b);
        assert!(all.iter().all(|s| s.backend == Remote));
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn a_free_instance_switches_backend() {
        let cfg = SelectConfig::default();
        // The first could never fit the rack: the file.
        let jobs = vec![job(0.0, 0.1, 200), job(0.0, 0.1, 10)];
        let mut b = Batch::new(Assignment::Dispatch(cfg), jobs, capacity(100, 1000), 1).unwrap();
        let first = b.start_next().unwrap();
        assert_eq!((first.backend, first.placement), (File, Placement::Create));
        assert_eq!(b.start_next(), None);
        b.finished(0);
        let second = b.start_next().unwrap();
        assert_eq!(
            (second.backend, second.placement),
            (Remote, Placement::Switch(0))
        );
    }

    #[test]
    fn a_job_no_backend_could_ever_hold_is_refused_up_front() {
        let big = vec![job(0.0, 0.1, 10), job(0.0, 0.1, 500)];
        let err = Batch::new(Assignment::Static(Remote), big.clone(), capacity(400, 0), 2);
        assert_eq!(
            err.unwrap_err(),
            BatchError::NeverFits {
                job: 1,
                bytes: 500 * MIB
            }
        );
        // The dispatcher sends it to the file instead.
        let cfg = SelectConfig::default();
        let mut b = Batch::new(
            Assignment::Dispatch(cfg),
            big.clone(),
            capacity(400, 1000),
            2,
        )
        .unwrap();
        let backends: Vec<_> = drain(&mut b).iter().map(|s| s.backend).collect();
        assert_eq!(backends, [Remote, File]);
        // No file backend configured for a static file assignment.
        assert!(Batch::new(Assignment::Static(File), big, capacity(400, 0), 2).is_err());
        assert_eq!(
            Batch::new(Assignment::Static(Remote), vec![], capacity(1, 1), 0).unwrap_err(),
            BatchError::NoInstances
        );
    }
}
