#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use super::bpf::*;
use super::rules::*;
use super::table::*;
use super::*;
use crate::plan::LandlockProc;

const PROFILES: [Profile; 6] = [
    Profile {
        mechanism: Mechanism::Bwrap,
        reach: Reach::Nothing,
    },
    Profile {
        mechanism: Mechanism::Bwrap,
        reach: Reach::OwnLoopback,
    },
    Profile {
        mechanism: Mechanism::Bwrap,
        reach: Reach::Everything,
    },
    Profile {
        mechanism: Mechanism::Landlock(LandlockProc::Own),
        reach: Reach::Nothing,
    },
    Profile {
        mechanism: Mechanism::Landlock(LandlockProc::Own),
        reach: Reach::Everything,
    },
    Profile {
        mechanism: Mechanism::Direct,
        reach: Reach::Everything,
    },
];

fn all_syscalls() -> Vec<Syscall> {
    let mut rules = BASE_RULES.to_vec();
    rules.extend_from_slice(SOCKET_OUTBOUND);
    rules.push(SOCKET_NO_UNIX);
    rules.extend_from_slice(SOCKET_ONLY_UNIX);
    rules.extend_from_slice(observe_rules(&Profile {
        mechanism: Mechanism::Bwrap,
        reach: Reach::OwnLoopback,
    }));
    rules.iter().map(|rule| rule.syscall).collect()
}

// The host's libc names Linux syscall numbers only when built for Linux.
#[cfg(target_os = "linux")]
#[test]
fn syscall_numbers_match_libc() {
    // The native column of the table against libc's constants.
    let arch = Arch::native().unwrap();
    let libc_number = |name: &str| -> Option<libc::c_long> {
        Some(match name {
            "ptrace" => libc::SYS_ptrace,
            "process_vm_readv" => libc::SYS_process_vm_readv,
            "process_vm_writev" => libc::SYS_process_vm_writev,
            "pidfd_getfd" => libc::SYS_pidfd_getfd,
            "kcmp" => libc::SYS_kcmp,
            "unshare" => libc::SYS_unshare,
            "setns" => libc::SYS_setns,
            "clone" => libc::SYS_clone,
            "clone3" => libc::SYS_clone3,
            "mount" => libc::SYS_mount,
            "umount2" => libc::SYS_umount2,
            "pivot_root" => libc::SYS_pivot_root,
            "chroot" => libc::SYS_chroot,
            "open_tree" => libc::SYS_open_tree,
            "move_mount" => libc::SYS_move_mount,
            "fsopen" => libc::SYS_fsopen,
            "fsconfig" => libc::SYS_fsconfig,
            "fsmount" => libc::SYS_fsmount,
            "fspick" => libc::SYS_fspick,
            "mount_setattr" => libc::SYS_mount_setattr,
            "bpf" => libc::SYS_bpf,
            "perf_event_open" => libc::SYS_perf_event_open,
            "userfaultfd" => libc::SYS_userfaultfd,
            "io_uring_setup" => libc::SYS_io_uring_setup,
            "io_uring_enter" => libc::SYS_io_uring_enter,
            "io_uring_register" => libc::SYS_io_uring_register,
            "add_key" => libc::SYS_add_key,
            "request_key" => libc::SYS_request_key,
            "keyctl" => libc::SYS_keyctl,
            "kexec_load" => libc::SYS_kexec_load,
            "kexec_file_load" => libc::SYS_kexec_file_load,
            "init_module" => libc::SYS_init_module,
            "finit_module" => libc::SYS_finit_module,
            "delete_module" => libc::SYS_delete_module,
            "name_to_handle_at" => libc::SYS_name_to_handle_at,
            "open_by_handle_at" => libc::SYS_open_by_handle_at,
            "fanotify_init" => libc::SYS_fanotify_init,
            "acct" => libc::SYS_acct,
            "swapon" => libc::SYS_swapon,
            "swapoff" => libc::SYS_swapoff,
            "reboot" => libc::SYS_reboot,
            "syslog" => libc::SYS_syslog,
            "quotactl" => libc::SYS_quotactl,
            "quotactl_fd" => libc::SYS_quotactl_fd,
            "lookup_dcookie" => libc::SYS_lookup_dcookie,
            "sethostname" => libc::SYS_sethostname,
            "setdomainname" => libc::SYS_setdomainname,
            "settimeofday" => libc::SYS_settimeofday,
            "clock_settime" => libc::SYS_clock_settime,
            "personality" => libc::SYS_personality,
            "ioctl" => libc::SYS_ioctl,
            "fchmod" => libc::SYS_fchmod,
            "fchmodat" => libc::SYS_fchmodat,
            "mknodat" => libc::SYS_mknodat,
            "openat" => libc::SYS_openat,
            "openat2" => libc::SYS_openat2,
            "socket" => libc::SYS_socket,
            "connect" => libc::SYS_connect,
            "sendto" => libc::SYS_sendto,
            #[cfg(target_arch = "x86_64")]
            "iopl" => libc::SYS_iopl,
            #[cfg(target_arch = "x86_64")]
            "ioperm" => libc::SYS_ioperm,
            #[cfg(target_arch = "x86_64")]
            "uselib" => libc::SYS_uselib,
            #[cfg(target_arch = "x86_64")]
            "chmod" => libc::SYS_chmod,
            #[cfg(target_arch = "x86_64")]
            "mknod" => libc::SYS_mknod,
            #[cfg(target_arch = "x86_64")]
            "open" => libc::SYS_open,
            #[cfg(target_arch = "x86_64")]
            "creat" => libc::SYS_creat,
            #[cfg(target_arch = "x86_64")]
            "fchmodat2" => libc::SYS_fchmodat2,
            _ => return None,
        })
    };
    let mut checked = 0;
    for syscall in all_syscalls() {
        let ours = syscall.number(arch).map(libc::c_long::from);
        match libc_number(syscall.name) {
            Some(theirs) => {
                assert_eq!(ours, Some(theirs), "{} on {}", syscall.name, arch.name());
                checked += 1;
            }
            // Not in libc 0.2 for this arch (fchmodat2 on aarch64, open_tree_attr): the
            // number is the unified one every architecture shares since 4.20.
            None => assert!(
                matches!(syscall.name, "open_tree_attr" | "fchmodat2"),
                "{} has no libc constant to check against",
                syscall.name
            ),
        }
    }
    assert!(checked > 60, "checked {checked}");
}

#[test]
fn every_profile_builds_deterministically_within_limits() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for profile in PROFILES {
            if matches!(profile.mechanism, Mechanism::Landlock(_))
                && profile.reach == Reach::OwnLoopback
            {
                continue;
            }
            let a = build_for(arch, &profile).unwrap();
            let b = build_for(arch, &profile).unwrap();
            assert_eq!(a, b);
            assert_eq!(a.as_bytes(), b.as_bytes());
            assert!(
                a.len() < 512,
                "{arch:?} {profile:?}: {} instructions",
                a.len()
            );
            assert_eq!(a.as_bytes().len(), a.len() * 8);
            let last = a.instructions().last().unwrap();
            assert_eq!(last.code, RET_K);
        }
    }
}

#[test]
fn landlock_loopback_only_is_refused() {
    let profile = Profile {
        mechanism: Mechanism::Landlock(LandlockProc::Own),
        reach: Reach::OwnLoopback,
    };
    assert!(matches!(
        build_for(Arch::X86_64, &profile),
        Err(SeccompError::UnsupportedNetwork { .. })
    ));
    assert!(rules_for(Arch::Aarch64, &profile).is_err());
}

#[test]
fn socket_rules_follow_the_mechanism_and_the_reach() {
    let socket_rules = |profile: &Profile| -> Vec<String> {
        rules_for(Arch::X86_64, profile)
            .unwrap()
            .into_iter()
            .filter(|rule| rule.syscall == "socket")
            .map(|rule| rule.condition)
            .collect()
    };
    // Every profile denies vsock; bwrap and docker add "Unix and route netlink only" for `none`
    // and nothing else.
    for profile in PROFILES {
        let rules = socket_rules(&profile);
        assert!(
            rules.iter().any(|c| c.contains("AF_VSOCK")),
            "{profile:?}: {rules:?}"
        );
    }
    for mechanism in [Mechanism::Bwrap, Mechanism::Docker] {
        let none = socket_rules(&Profile {
            mechanism,
            reach: Reach::Nothing,
        });
        assert_eq!(none.len(), 3, "{none:?}");
        assert!(
            none[1].contains("not in {AF_UNIX (0x1), AF_NETLINK (0x10)}"),
            "{none:?}"
        );
        assert!(none[2].contains("NETLINK_ROUTE"), "{none:?}");
        for reach in [Reach::OwnLoopback, Reach::Everything] {
            assert_eq!(socket_rules(&Profile { mechanism, reach }).len(), 1);
        }
    }
    assert_eq!(socket_rules(&PROFILES[5]).len(), 1, "direct: vsock only");
    assert!(socket_rules(&PROFILES[3]).len() > 1, "landlock: by family");
}

#[test]
fn the_same_syscall_never_appears_in_two_tables() {
    // One name, one pair of numbers: guards against a typo giving two names one number.
    let syscalls = all_syscalls();
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for a in &syscalls {
            for b in &syscalls {
                if a.name != b.name
                    && let (Some(x), Some(y)) = (a.number(arch), b.number(arch))
                {
                    assert_ne!(x, y, "{} and {} on {arch:?}", a.name, b.name);
                }
            }
        }
    }
}

#[test]
fn out_of_range_jumps_are_errors_not_panics() {
    let mut asm = Asm::default();
    let far = asm.label();
    asm.jump(JEQ_K, 0, Target::Label(far), Target::Next);
    for _ in 0..300 {
        asm.ret(Action::Allow);
    }
    asm.bind(far);
    asm.ret(Action::Allow);
    assert!(matches!(
        asm.finish(),
        Err(SeccompError::JumpOutOfRange { at: 0 })
    ));

    let mut asm = Asm::default();
    let end = asm.label();
    asm.jump(JEQ_K, 0, Target::Label(end), Target::Next);
    asm.ret(Action::Allow);
    asm.bind(end);
    assert!(matches!(
        asm.finish(),
        Err(SeccompError::JumpOutOfRange { at: 0 })
    ));
}

#[test]
fn an_empty_set_never_matches() {
    let mut asm = Asm::default();
    let fail = asm.label();
    emit_test(
        &mut asm,
        &Test::In {
            arg: 0,
            mask: u32::MAX,
            values: &[],
        },
        fail,
    );
    asm.ret(Action::EPERM);
    asm.bind(fail);
    asm.ret(Action::Allow);
    let program = asm.finish().unwrap();
    // load; jset 0 (never true) -> fail; ret EPERM; fail: ret ALLOW
    assert_eq!(
        program[1],
        Instruction {
            code: JSET_K,
            jt: 0,
            jf: 1,
            k: 0
        }
    );
    assert_eq!(program[3].k, Action::Allow.to_ret());
}

#[test]
fn actions_round_trip() {
    for action in [
        Action::Allow,
        Action::EPERM,
        Action::ENOSYS,
        Action::KillProcess,
    ] {
        assert_eq!(Action::from_ret(action.to_ret()), Some(action));
    }
    assert_eq!(Action::EPERM.to_string(), "EPERM");
    assert_eq!(Action::from_ret(0x0003_0000), None);
}

#[cfg(target_os = "linux")]
#[test]
fn install_refuses_a_foreign_program() {
    let native = Arch::native().unwrap();
    let foreign = if native == Arch::X86_64 {
        Arch::Aarch64
    } else {
        Arch::X86_64
    };
    let program = build_for(foreign, &PROFILES[0]).unwrap();
    assert!(matches!(
        install(&program),
        Err(SeccompError::ArchMismatch { .. })
    ));
}

/// Whether an entry of an OCI profile matches `args`, read as runc reads it: an entry whose
/// arguments repeat an index becomes one libseccomp rule per argument (alternatives), otherwise
/// one rule whose arguments must all hold; libseccomp compares all 64 bits.
fn oci_entry_matches(entry: &serde_json::Value, args: &[u64; 6]) -> bool {
    let conditions = entry["args"].as_array().unwrap();
    let holds = |condition: &serde_json::Value| {
        let arg = args[usize::try_from(condition["index"].as_u64().unwrap()).unwrap()];
        let value = condition["value"].as_u64().unwrap();
        let value_two = condition["valueTwo"].as_u64().unwrap();
        match condition["op"].as_str().unwrap() {
            "SCMP_CMP_MASKED_EQ" => arg & value == value_two,
            "SCMP_CMP_NE" => arg != value,
            "SCMP_CMP_GT" => arg > value,
            other => panic!("an operator the test does not know: {other}"),
        }
    };
    let mut indexes: Vec<u64> = conditions
        .iter()
        .map(|condition| condition["index"].as_u64().unwrap())
        .collect();
    indexes.sort_unstable();
    let repeated = indexes.windows(2).any(|pair| pair[0] == pair[1]);
    if conditions.is_empty() {
        true
    } else if repeated {
        conditions.iter().any(holds)
    } else {
        conditions.iter().all(holds)
    }
}

#[test]
fn the_docker_profile_denies_what_the_rules_deny_as_runc_reads_it() {
    // Found by the escape battery: `none` under docker denied AF_UNIX too, because runc reads
    // `arg0 != AF_UNIX && arg0 != AF_NETLINK` in one entry as two alternatives.
    let arch = Arch::native().unwrap_or(Arch::X86_64);
    // Every value a rule names, its neighbours, and the low values where families and flags
    // live; each also with junk in the high half.
    let mut values: Vec<u64> = (0..64).collect();
    for rule in all_rules() {
        for test in rule.tests {
            match *test {
                Test::AnyBit { mask, .. } => {
                    values.extend((0..32).map(|bit| u64::from(mask & (1 << bit))));
                }
                Test::In { values: listed, .. } | Test::NotIn { values: listed, .. } => {
                    for (value, _) in listed {
                        let value = u64::from(*value);
                        values.extend([value.saturating_sub(1), value, value + 1]);
                    }
                }
            }
        }
    }
    values.extend([u64::from(u32::MAX), 0o4000, 0o6000]);
    // Exact agreement holds for what the kernel reads (32 bits); the high half is tried below.
    values.retain(|value| *value <= u64::from(u32::MAX));
    values.sort_unstable();
    values.dedup();
    for reach in [Reach::Nothing, Reach::OwnLoopback, Reach::Everything] {
        let profile = Profile {
            mechanism: Mechanism::Docker,
            reach,
        };
        let oci = oci_profile(arch, &profile).unwrap();
        let entries = oci["syscalls"].as_array().unwrap();
        let rules = rule_set(&profile).unwrap();
        let mut names: Vec<&str> = rules.iter().map(|rule| rule.syscall.name).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let syscall_rules: Vec<&Rule> = rules
                .iter()
                .filter(|rule| rule.syscall.name == name)
                .collect();
            if syscall_rules[0].syscall.number(arch).is_none() {
                continue;
            }
            let syscall_entries: Vec<&serde_json::Value> = entries
                .iter()
                .filter(|entry| entry["names"][0] == name)
                .collect();
            // Each argument a rule of this syscall tests takes every value in turn; the others
            // stay zero.
            let mut tested: Vec<u8> = syscall_rules
                .iter()
                .flat_map(|rule| rule.tests.iter().map(test_arg))
                .collect();
            tested.sort_unstable();
            tested.dedup();
            let mut cases: Vec<[u64; 6]> = vec![[0; 6]];
            for arg in &tested {
                cases = cases
                    .iter()
                    .flat_map(|case| {
                        values.iter().map(move |value| {
                            let mut case = *case;
                            case[usize::from(*arg)] = *value;
                            case
                        })
                    })
                    .collect();
                // Two tested arguments make |values|² cases; that is still small.
            }
            for case in cases {
                let by_rules = syscall_rules
                    .iter()
                    .any(|rule| rule.tests.iter().all(|t| t.holds(&case)));
                let by_oci = syscall_entries
                    .iter()
                    .any(|entry| oci_entry_matches(entry, &case));
                assert_eq!(
                    by_oci, by_rules,
                    "{name}{case:?} under {reach:?}: OCI denies = {by_oci}, rules deny = {by_rules}"
                );
                // The same call with junk in the high halves: the kernel sees the low halves, so
                // whatever the rules deny must stay denied.
                let mut junk = case;
                for arg in &tested {
                    junk[usize::from(*arg)] |= 0xdead_0000_0000;
                }
                if by_rules {
                    assert!(
                        syscall_entries
                            .iter()
                            .any(|entry| oci_entry_matches(entry, &junk)),
                        "{name}{junk:?} under {reach:?}: junk in the high half escapes the OCI profile"
                    );
                }
            }
        }
    }
}

fn all_rules() -> Vec<Rule> {
    let mut rules = BASE_RULES.to_vec();
    rules.extend_from_slice(SOCKET_OUTBOUND);
    rules.push(SOCKET_NO_UNIX);
    rules.extend_from_slice(SOCKET_ONLY_UNIX);
    rules
}

fn test_arg(test: &Test) -> u8 {
    match *test {
        Test::AnyBit { arg, .. } | Test::In { arg, .. } | Test::NotIn { arg, .. } => arg,
    }
}

/// Beneath the observed filter, the runtime's profile keeps only what the observed filter does
/// not refuse itself (the `ENOSYS` steers), and the observed filter refuses every call the plain
/// profile refuses with an errno: between them nothing the plain profile refuses gets through.
#[test]
fn the_profile_beneath_the_observer_leaves_exactly_the_errno_refusals_to_it() {
    let arch = Arch::X86_64;
    for reach in [Reach::Nothing, Reach::OwnLoopback, Reach::Everything] {
        let profile = Profile {
            mechanism: Mechanism::Docker,
            reach,
        };
        let plain = oci_profile(arch, &profile).unwrap();
        let beneath = oci_profile_beneath_observer(arch, &profile).unwrap();
        let entries = |p: &serde_json::Value| p["syscalls"].as_array().unwrap().clone();
        let kept = entries(&beneath);
        assert!(!kept.is_empty(), "the ENOSYS steers stay");
        for entry in &kept {
            assert_eq!(entry["action"], "SCMP_ACT_ERRNO", "{entry}");
            assert_eq!(entry["errnoRet"], libc::ENOSYS, "{entry}");
            assert!(entries(&plain).contains(entry), "{entry}");
        }
        let left_out: Vec<serde_json::Value> = entries(&plain)
            .into_iter()
            .filter(|entry| !kept.contains(entry))
            .collect();
        assert!(!left_out.is_empty());
        let observed = build_for(arch, &profile).unwrap().observed();
        for entry in left_out {
            assert_eq!(entry["action"], "SCMP_ACT_ERRNO", "{entry}");
            assert_ne!(entry["errnoRet"], libc::ENOSYS, "{entry}");
            // The observed filter stops that syscall (for the listener to refuse), for some
            // arguments at least; `judge` gives the errno the listener answers with.
            let name = entry["names"][0].as_str().unwrap();
            let number = rule_set(&profile)
                .unwrap()
                .iter()
                .find(|rule| rule.syscall.name == name)
                .and_then(|rule| rule.syscall.number(arch))
                .unwrap();
            assert!(
                observed.instructions().iter().any(|insn| insn.k == number),
                "{name} is not in the observed program"
            );
        }
    }
}

/// Enough of a classic-BPF interpreter for the assembler's own output (the integration tests
/// have the full one): the return value of `program` for syscall `nr` with `arg0`.
fn run(program: &[Instruction], audit_arch: u32, nr: u32, arg0: u32) -> u32 {
    let mut acc = 0u32;
    let mut pc = 0usize;
    loop {
        let insn = program[pc];
        let target = |offset: u8| pc + 1 + usize::from(offset);
        pc = match insn.code {
            LD_W_ABS => {
                acc = match insn.k {
                    NR_OFFSET => nr,
                    ARCH_OFFSET => audit_arch,
                    k if k == arg_low_offset(0) => arg0,
                    _ => 0,
                };
                pc + 1
            }
            ALU_AND_K => {
                acc &= insn.k;
                pc + 1
            }
            JEQ_K => target(if acc == insn.k { insn.jt } else { insn.jf }),
            JGE_K => target(if acc >= insn.k { insn.jt } else { insn.jf }),
            JSET_K => target(if acc & insn.k != 0 { insn.jt } else { insn.jf }),
            JA => pc + 1 + insn.k as usize,
            RET_K => return insn.k,
            code => panic!("opcode {code:#x} at {pc}"),
        };
    }
}

/// The search over the syscall numbers jumps with the conditional jumps' 8-bit offsets when
/// every subtree fits them (the real rules' programs), and with unconditional jumps when one
/// does not; either way every call gets what its rules say.
#[test]
fn a_search_too_long_for_short_jumps_takes_unconditional_ones() {
    let values: &'static [(u32, &'static str)] = Box::leak(
        (0..40u32)
            .map(|v| (v * 3, "v"))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let tests: &'static [Test] = Box::leak(Box::new([Test::In {
        arg: 0,
        mask: u32::MAX,
        values,
    }]));
    let arch = Arch::X86_64;
    let mut names = std::collections::BTreeSet::new();
    let rules: Vec<Rule> = all_syscalls()
        .into_iter()
        .filter(|syscall| syscall.number(arch).is_some() && names.insert(syscall.name))
        .map(|syscall| Rule {
            syscall,
            tests,
            action: Action::EPERM,
            closes: "a test",
        })
        .collect();
    let numbers: std::collections::BTreeSet<u32> = rules
        .iter()
        .filter_map(|rule| rule.syscall.number(arch))
        .collect();
    let program = assemble(arch, &rules).unwrap();
    assert!(program.len() > 1000, "{} instructions", program.len());
    assert!(program.iter().any(|insn| insn.code == JA));
    for nr in 0..1100u32 {
        for arg in [0u32, 3, 117, 118, 120, 1000] {
            let denied = numbers.contains(&nr) && arg % 3 == 0 && arg / 3 < 40;
            let want = if denied { Action::EPERM } else { Action::Allow };
            assert_eq!(
                run(&program, arch.audit_arch(), nr, arg),
                want.to_ret(),
                "nr {nr} arg {arg}"
            );
        }
    }
    assert_eq!(
        run(&program, 0x4000_0003, 39, 0),
        Action::KillProcess.to_ret()
    );
    for profile in PROFILES {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let program = build_for(arch, &profile).unwrap();
            assert!(
                !program.instructions().iter().any(|insn| insn.code == JA),
                "{arch:?} {profile:?}"
            );
        }
    }
}

/// What a launcher records is the length of the program the sandbox builds.
#[test]
fn the_instruction_count_is_the_built_programs_length() {
    for profile in PROFILES {
        assert_eq!(
            instruction_count(&profile).unwrap(),
            build(&profile).unwrap().len(),
            "{profile:?}"
        );
    }
}
