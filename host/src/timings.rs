//! Where the time of one `palisade run` goes: the phases `run --timings` prints on stderr and
//! every outcome record carries as `timings`.
//!
//! The contract:
//! - The phases are contiguous: each one runs from the end of the one before it (the first
//!   from `main`) to its own end, a boundary the launcher or its supervisor marks with the
//!   monotonic clock ([`Clock::end`]). So they add up to `total` (from `main` until the outcome
//!   is about to be written), and nothing is counted twice.
//! - A boundary that was not reached or cannot be observed (a refused or failed launch, no start
//!   signal through `docker run`) leaves its phase `None` (`null`), and its time counts in the
//!   next phase that was measured.
//! - `process start` is not a phase of that sequence: it is what happened before `main` (exec,
//!   dynamic loading, the runtime's start), measured as the CPU time the process had used by
//!   then. Time spent waiting for a CPU or the disk is not in it: it is a lower bound.
//! - The figures are whole microseconds, from the launcher's clock. They are facts about this
//!   run, never decision inputs: the engine sees no clock, and the timings go into the
//!   outcome, not the decision record.
//! - They are always measured (a few clock reads) and always recorded; `--timings` only prints
//!   them.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::ser::{Serialize, SerializeMap, Serializer};

/// The phases of a run, in the order they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Arguments, the host configuration and flags, the run's temp dir.
    Configuration,
    /// The backend probes (usually from the probe cache).
    Probes,
    /// The host facts (home, workspace, writable roots resolved on the filesystem) and the
    /// taskpack and task contract read.
    FilesystemFacts,
    /// wasmtime's engine and the compiled component (from the compiled-component cache).
    ComponentLoad,
    /// Instantiating the component and the decision itself.
    Decide,
    /// The decision record appended to the audit file and synced (when there is one).
    AuditWrite,
    /// The image check and network bridge when the plan needs them, and the launch plan.
    Plan,
    /// Until the launched program (bwrap, the sandbox init, the container client) has been
    /// executed: the command's path, what is at the plan's paths, the seccomp program, the
    /// arguments, the run's cgroup, fork and exec.
    Spawn,
    /// Until the sandbox signals that the command is being executed.
    SandboxSetup,
    /// Until the launched process exited.
    Command,
    /// Until the rest of the tree was killed, reaped and verified gone.
    ReapAndVerify,
    /// The launch's own cleanup (cgroup, placeholders, mountpoints, a container), the network
    /// bridge's account, the denials, the temp dir's removal.
    Cleanup,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 12] = [
        Phase::Configuration,
        Phase::Probes,
        Phase::FilesystemFacts,
        Phase::ComponentLoad,
        Phase::Decide,
        Phase::AuditWrite,
        Phase::Plan,
        Phase::Spawn,
        Phase::SandboxSetup,
        Phase::Command,
        Phase::ReapAndVerify,
        Phase::Cleanup,
    ];

    /// The key in the outcome record's `timings`.
    pub fn key(self) -> &'static str {
        match self {
            Phase::Configuration => "configurationUs",
            Phase::Probes => "probesUs",
            Phase::FilesystemFacts => "filesystemFactsUs",
            Phase::ComponentLoad => "componentLoadUs",
            Phase::Decide => "decideUs",
            Phase::AuditWrite => "auditWriteUs",
            Phase::Plan => "planUs",
            Phase::Spawn => "spawnUs",
            Phase::SandboxSetup => "sandboxSetupUs",
            Phase::Command => "commandUs",
            Phase::ReapAndVerify => "reapAndVerifyUs",
            Phase::Cleanup => "cleanupUs",
        }
    }

    /// The row's name in the `--timings` table.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Configuration => "configuration",
            Phase::Probes => "probes",
            Phase::FilesystemFacts => "filesystem facts",
            Phase::ComponentLoad => "component load",
            Phase::Decide => "decide",
            Phase::AuditWrite => "audit write",
            Phase::Plan => "plan",
            Phase::Spawn => "spawn",
            Phase::SandboxSetup => "sandbox setup",
            Phase::Command => "command",
            Phase::ReapAndVerify => "reap and verify",
            Phase::Cleanup => "cleanup",
        }
    }
}

/// When `main` started, and the CPU time used before it ([`mark_main`]).
static MAIN: OnceLock<(Instant, Option<Duration>)> = OnceLock::new();

/// Marks the start of `main`; the first thing the binary does. Costs two clock reads.
pub fn mark_main() {
    let _ = MAIN.set((Instant::now(), crate::facts::process_cpu_time()));
}

/// The boundaries of one run's phases, as they are reached.
#[derive(Clone, Debug)]
pub struct Clock {
    main: Instant,
    process_start: Option<Duration>,
    ends: BTreeMap<Phase, Instant>,
}

impl Clock {
    /// A clock that starts at `main` (or now, when [`mark_main`] was not called).
    pub fn start() -> Clock {
        let (main, process_start) = MAIN
            .get()
            .copied()
            .unwrap_or_else(|| (Instant::now(), None));
        Clock {
            main,
            process_start,
            ends: BTreeMap::new(),
        }
    }

    /// `phase` ends now.
    pub fn end(&mut self, phase: Phase) {
        self.ends.insert(phase, Instant::now());
    }

    /// `phase` ended at `at`, when it was observed.
    pub fn end_at(&mut self, phase: Phase, at: Option<Instant>) {
        if let Some(at) = at {
            self.ends.insert(phase, at);
        }
    }

    /// The phases so far, each from the last boundary before it. Each boundary is taken in
    /// whole microseconds after `main` first, so the phases add up exactly to the total.
    pub fn timings(&self) -> Timings {
        let mut last = 0;
        let phases = Phase::ALL
            .iter()
            .map(|phase| {
                let took = self.ends.get(phase).map(|end| {
                    let at = micros(end.saturating_duration_since(self.main));
                    let took = at.saturating_sub(last);
                    last = last.max(at);
                    took
                });
                (*phase, took)
            })
            .collect();
        Timings {
            process_start_us: self.process_start.map(micros),
            phases,
            total_us: last,
        }
    }
}

/// The measured phases of a run (see the module documentation for the contract). Serialized
/// as an object of whole microseconds in a fixed order: `processStartUs`, one key per phase
/// ([`Phase::key`]), `totalUs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timings {
    /// CPU time used before `main`, µs (a lower bound of the time from exec to `main`).
    pub process_start_us: Option<u64>,
    /// Every phase in order, µs; `None` when its end was not observed.
    pub phases: Vec<(Phase, Option<u64>)>,
    /// From `main` to the last boundary, µs: the sum of the phases.
    pub total_us: u64,
}

impl Timings {
    /// The `--timings` table: one line per phase, then the total and, when given, the outcome
    /// write that followed the record (the record cannot hold its own write).
    pub fn table(&self, outcome_write: Option<Duration>) -> Vec<String> {
        let total = self.total_us;
        let row = |label: &str, value: Option<u64>, note: &str| {
            let value = value.map_or_else(|| "-".to_owned(), |us| us.to_string());
            format!("  {label:<17} {value:>9}{note}")
        };
        let share = |us: u64| {
            let percent = us.saturating_mul(100).checked_div(total).unwrap_or(0);
            format!("  {percent:>3}%")
        };
        let mut lines = vec![
            "palisade: timings (µs, monotonic clock; `-` not observed, counted in the next row)"
                .to_owned(),
        ];
        lines.push(row(
            "process start",
            self.process_start_us,
            "        CPU time before main (a lower bound)",
        ));
        for (phase, us) in &self.phases {
            lines.push(row(phase.label(), *us, &us.map(share).unwrap_or_default()));
        }
        lines.push(row("total", Some(total), "        main to the outcome"));
        if let Some(write) = outcome_write {
            lines.push(row(
                "outcome write",
                Some(micros(write)),
                "        after the record, so not in it",
            ));
        }
        lines
    }
}

impl Serialize for Timings {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.phases.len() + 2))?;
        map.serialize_entry("processStartUs", &self.process_start_us)?;
        for (phase, us) in &self.phases {
            map.serialize_entry(phase.key(), us)?;
        }
        map.serialize_entry("totalUs", &self.total_us)?;
        map.end()
    }
}

/// Whole microseconds.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    fn clock_at(main: Instant) -> Clock {
        Clock {
            main,
            process_start: Some(Duration::from_micros(700)),
            ends: BTreeMap::new(),
        }
    }

    #[test]
    fn phases_are_contiguous_and_add_up_to_the_total() {
        let main = Instant::now();
        let mut clock = clock_at(main);
        for (i, phase) in Phase::ALL.iter().enumerate() {
            let at = main + Duration::from_micros(100 * (i as u64 + 1) * (i as u64 + 1));
            clock.end_at(*phase, Some(at));
        }
        let timings = clock.timings();
        let sum: u64 = timings.phases.iter().filter_map(|(_, us)| *us).sum();
        assert_eq!(sum, timings.total_us);
        assert_eq!(timings.total_us, 100 * 12 * 12);
        assert_eq!(timings.phases[0], (Phase::Configuration, Some(100)));
        assert_eq!(timings.phases[1], (Phase::Probes, Some(300)));
    }

    #[test]
    fn an_unobserved_boundary_counts_in_the_next_measured_phase() {
        let main = Instant::now();
        let mut clock = clock_at(main);
        clock.end_at(Phase::Configuration, Some(main + Duration::from_micros(10)));
        clock.end_at(Phase::Spawn, Some(main + Duration::from_micros(50)));
        clock.end_at(Phase::SandboxSetup, None);
        clock.end_at(Phase::Command, Some(main + Duration::from_micros(90)));
        let timings = clock.timings();
        let by_phase: BTreeMap<Phase, Option<u64>> = timings.phases.iter().copied().collect();
        assert_eq!(by_phase[&Phase::Probes], None);
        assert_eq!(by_phase[&Phase::Spawn], Some(40));
        assert_eq!(by_phase[&Phase::SandboxSetup], None);
        assert_eq!(by_phase[&Phase::Command], Some(40));
        assert_eq!(by_phase[&Phase::Cleanup], None);
        assert_eq!(timings.total_us, 90);
    }

    #[test]
    fn serializes_whole_microseconds_in_a_fixed_order() {
        let main = Instant::now();
        let mut clock = clock_at(main);
        clock.end_at(
            Phase::Configuration,
            Some(main + Duration::from_nanos(1_999)),
        );
        clock.end_at(Phase::Cleanup, Some(main + Duration::from_nanos(5_000)));
        let json = serde_json::to_string(&clock.timings()).unwrap();
        assert_eq!(
            json,
            r#"{"processStartUs":700,"configurationUs":1,"probesUs":null,"filesystemFactsUs":null,"componentLoadUs":null,"decideUs":null,"auditWriteUs":null,"planUs":null,"spawnUs":null,"sandboxSetupUs":null,"commandUs":null,"reapAndVerifyUs":null,"cleanupUs":4,"totalUs":5}"#
        );
    }

    #[test]
    fn the_table_has_a_row_per_phase_and_the_total() {
        let main = Instant::now();
        let mut clock = clock_at(main);
        clock.end_at(
            Phase::Configuration,
            Some(main + Duration::from_micros(250)),
        );
        clock.end_at(Phase::Cleanup, Some(main + Duration::from_micros(1000)));
        let lines = clock.timings().table(Some(Duration::from_micros(42)));
        assert_eq!(lines.len(), 1 + 1 + 12 + 1 + 1);
        assert_eq!(lines[2], "  configuration           250   25%");
        assert_eq!(lines[3], "  probes                    -");
        assert!(lines[14].starts_with("  total                  1000"));
        assert!(lines[15].starts_with("  outcome write            42"));
    }
}
