#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]
use super::procfs::parse_stat;
use super::*;

#[test]
fn stat_parses_names_with_spaces_and_parentheses() {
    let line =
        b"4242 (a) b (c)) S 17 4242 4242 0 -1 4194304 100 0 0 0 5 7 11 13 20 0 3 0 999 1000 50";
    let s = parse_stat(line).unwrap();
    assert_eq!(
        (s.pid, s.ppid, s.cpu_ticks, s.threads, s.start),
        (4242, 17, 36, 3, 999)
    );
    assert_eq!(s.name(), b"a) b (c)");
}

#[test]
fn exit_codes_follow_the_shell_convention() {
    assert_eq!(ExitStatus::Exit(3).exit_code(), 3);
    assert_eq!(ExitStatus::Signal(9).exit_code(), 137);
}

#[test]
fn outcome_serializes_for_the_audit_record() {
    let outcome = Outcome {
        status: ExitStatus::Signal(15),
        ended_by: EndReason::Signal(15),
        duration: Duration::from_millis(1500),
        processes_reaped: 3,
        processes_killed: 1,
        grace_expired: false,
        tree_empty: true,
        enforcement: vec![Enforcement::as_given(Budget::Memory, Enforcer::Cgroup)],
        cleanup_mechanisms: vec![Cleanup::PidNamespace, Cleanup::CgroupFreezer],
        cleanup: Duration::from_millis(4),
        usage: Usage::default(),
        notes: vec![],
        marks: Marks::default(),
    };
    let json = serde_json::to_string(&outcome).unwrap();
    assert_eq!(
        json,
        r#"{"status":{"signal":15},"endedBy":{"signal":15},"durationMs":1500,"processesReaped":3,"processesKilled":1,"treeEmpty":true,"enforcement":[{"budget":"memory","by":"cgroup"}],"cleanupMechanisms":["pid-namespace","cgroup-freezer"],"cleanupMs":4,"usage":{"cpuMs":null,"peakMemoryBytes":null,"peakProcesses":null},"notes":[]}"#
    );
    let back: Outcome = serde_json::from_str(&json).unwrap();
    assert_eq!(back, outcome);
    let exited: EndReason = serde_json::from_str(r#""command-exited""#).unwrap();
    assert_eq!(exited, EndReason::CommandExited);
}

#[test]
fn a_pid_namespace_gets_only_the_controllers_a_budget_uses() {
    use crate::cgroup::Controller::{self, Cpuacct, Freezer, Memory, Pids};
    use crate::plan::Budgets;
    let wall_clock_only = Budgets {
        wall_clock: Some(Duration::from_secs(5)),
        ..Budgets::default()
    };
    let memory = Budgets {
        memory_bytes: Some(1 << 20),
        ..Budgets::default()
    };
    let all: Vec<Controller> = Controller::ALL.to_vec();
    let controllers = |budgets: &Budgets, kind| {
        super::linux::cgroup_controllers(budgets, kind)
            .map(|set| set.into_iter().collect::<Vec<_>>())
    };
    // Launched directly, the cgroup is part of the cleanup: every controller, always.
    assert_eq!(
        controllers(&Budgets::default(), LaunchKind::Plain),
        Some(all)
    );
    // In a PID namespace, no cgroup unless a budget needs a controller: what a killed
    // supervisor's bwrap leaves is found by its process group (`kill_group_leftovers`).
    for kind in [LaunchKind::Bwrap, LaunchKind::SandboxInit] {
        assert_eq!(controllers(&Budgets::default(), kind), None);
        assert_eq!(controllers(&wall_clock_only, kind), None);
    }
    for kind in [LaunchKind::Bwrap, LaunchKind::SandboxInit] {
        assert_eq!(controllers(&memory, kind), Some(vec![Memory, Freezer]));
        let every = Budgets {
            memory_bytes: Some(1 << 20),
            max_processes: Some(10),
            cpu_seconds: Some(1),
            ..Budgets::default()
        };
        assert_eq!(
            controllers(&every, kind),
            Some(vec![Pids, Memory, Cpuacct, Freezer])
        );
    }
}
