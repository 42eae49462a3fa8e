//! The same rules as a Docker (OCI / libseccomp) profile, for `docker run --security-opt
//! seccomp=…`.

use super::rules::{Test, rule_set};
use super::{Action, Arch, Profile, SeccompError};

/// The rules of [`rule_set`] as a Docker seccomp profile (`docker run --security-opt
/// seccomp=FILE`): default allow, every rule a deny entry, for `arch` only.
///
/// libseccomp compares 64-bit arguments, so every test masks with a 32-bit mask
/// (`SCMP_CMP_MASKED_EQ`) and the high half cannot disguise a value, as in the BPF above. A
/// test "any of these bits" becomes one entry per bit and "one of these values" one entry per
/// value (entries of a syscall are alternatives); a rule with several tests becomes the
/// cartesian product. "None of this value" becomes an `SCMP_CMP_NE`, which compares all 64
/// bits: junk in the high half makes the call *denied*, never allowed. "None of these values"
/// becomes one entry per aligned block of the complement (runc turns repeated indexes in one
/// entry into alternatives, so a conjunction of `NE`s would deny everything). Only `arch` is listed: libseccomp gives any other ABI — i386, and x32, whose
/// numbers it tells apart from x86_64's — the profile's bad-architecture action, so no second
/// syscall table slips past the rules.
///
/// # Errors
/// As [`build_for`](super::build_for).
pub fn oci_profile(arch: Arch, profile: &Profile) -> Result<serde_json::Value, SeccompError> {
    profile_json(arch, profile, false)
}

/// The profile the container runtime installs *beneath* Palisade's own observed program
/// ([`Program::observed`](super::Program::observed), installed by the stub in the container
/// before the command runs): [`oci_profile`] without the rules that refuse with an errno other
/// than `ENOSYS`. The kernel runs every stacked filter and takes the strictest answer, so an
/// errno here would always win over the observed program's stop, and the refusal would go
/// unrecorded; the observed program refuses exactly those calls itself (its listener answers
/// with the same errno, and with `ENOSYS` if the listener is gone). The `ENOSYS` steers stay:
/// the observed program has them too.
///
/// Only for a container whose entrypoint installs the observed program and fails before the
/// command runs if it cannot: the calls this profile leaves out are refused by nothing else.
///
/// # Errors
/// As [`oci_profile`].
pub fn oci_profile_beneath_observer(
    arch: Arch,
    profile: &Profile,
) -> Result<serde_json::Value, SeccompError> {
    profile_json(arch, profile, true)
}

fn profile_json(
    arch: Arch,
    profile: &Profile,
    beneath_observer: bool,
) -> Result<serde_json::Value, SeccompError> {
    use serde_json::json;
    let mut entries = Vec::new();
    for rule in rule_set(profile)? {
        if rule.syscall.number(arch).is_none() {
            continue;
        }
        if beneath_observer
            && matches!(rule.action, Action::Errno(_))
            && rule.action != Action::ENOSYS
        {
            continue;
        }
        let mut combinations: Vec<Vec<serde_json::Value>> = vec![Vec::new()];
        for test in rule.tests {
            let alternatives = oci_alternatives(test).ok_or(SeccompError::NotExpressible {
                syscall: rule.syscall.name,
            })?;
            combinations = combinations
                .iter()
                .flat_map(|prefix| {
                    alternatives.iter().map(move |alternative| {
                        let mut args = prefix.clone();
                        args.extend(alternative.iter().cloned());
                        args
                    })
                })
                .collect();
        }
        let (action, errno) = match rule.action {
            Action::Errno(errno) => ("SCMP_ACT_ERRNO", Some(errno)),
            Action::KillProcess => ("SCMP_ACT_KILL_PROCESS", None),
            // Observing needs a listener, which the runtime does not hand over; the plain
            // program allows these calls (and `rule_set` has none of them anyway).
            Action::Allow | Action::Observe => ("SCMP_ACT_ALLOW", None),
        };
        for args in combinations {
            // runc reads repeated indexes as alternatives; a conjunction needs distinct ones.
            let mut indexes: Vec<u64> = args
                .iter()
                .filter_map(|arg| arg.get("index").and_then(serde_json::Value::as_u64))
                .collect();
            indexes.sort_unstable();
            if indexes.windows(2).any(|pair| pair.first() == pair.get(1)) {
                return Err(SeccompError::NotExpressible {
                    syscall: rule.syscall.name,
                });
            }
            let mut entry = json!({
                "names": [rule.syscall.name],
                "action": action,
                "args": args,
                "comment": rule.closes,
            });
            if let (Some(errno), Some(object)) = (errno, entry.as_object_mut()) {
                object.insert("errnoRet".to_owned(), json!(errno));
            }
            entries.push(entry);
        }
    }
    let arch_name = match arch {
        Arch::X86_64 => "SCMP_ARCH_X86_64",
        Arch::Aarch64 => "SCMP_ARCH_AARCH64",
    };
    Ok(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": [arch_name],
        "syscalls": entries,
    }))
}

/// One test as alternatives, each a list of libseccomp comparisons that must all hold.
fn oci_alternatives(test: &Test) -> Option<Vec<Vec<serde_json::Value>>> {
    use serde_json::json;
    let masked_eq = |arg: u8, mask: u32, value: u32| json!({"index": arg, "value": mask, "valueTwo": value & mask, "op": "SCMP_CMP_MASKED_EQ"});
    Some(match *test {
        Test::AnyBit { arg, mask, .. } => (0..32)
            .map(|bit| 1u32 << bit)
            .filter(|bit| mask & bit != 0)
            .map(|bit| vec![masked_eq(arg, bit, bit)])
            .collect(),
        Test::In { arg, mask, values } => values
            .iter()
            .map(|(value, _)| vec![masked_eq(arg, mask, *value)])
            .collect(),
        // libseccomp has no masked "not equal"; every rule today tests the plain value.
        Test::NotIn { mask, .. } if mask != u32::MAX => return None,
        Test::NotIn { arg, values, .. } => match values {
            [(value, _)] => vec![vec![
                json!({"index": arg, "value": value, "valueTwo": 0, "op": "SCMP_CMP_NE"}),
            ]],
            // runc adds an entry whose arguments repeat an index as one rule *per argument*
            // (alternatives, not a conjunction), so `!= a && != b` on one argument would deny
            // everything. Spell the complement out instead, as aligned blocks of the low 32
            // bits (the kernel's `int`/`unsigned int`), like CIDR prefixes.
            _ => complement_blocks(values)
                .into_iter()
                .map(|(value, mask)| vec![masked_eq(arg, mask, value)])
                .collect(),
        },
    })
}

/// The 32-bit values that are none of `values`, as `(value, mask)` blocks: `x` is in a block
/// when `x & mask == value`. Each gap between listed values takes at most 64 blocks.
fn complement_blocks(values: &[(u32, &str)]) -> Vec<(u32, u32)> {
    let mut listed: Vec<u64> = values.iter().map(|(value, _)| u64::from(*value)).collect();
    listed.sort_unstable();
    listed.dedup();
    let mut blocks = Vec::new();
    let mut low: u64 = 0;
    // The gaps, ending with the one above the largest value (up to 2^32 - 1).
    for end in listed.iter().copied().chain([1 << 32]) {
        while low < end {
            // The largest aligned power of two that starts at `low` and stays below `end`.
            let mut size: u64 = if low == 0 {
                1 << 32
            } else {
                1 << low.trailing_zeros()
            };
            while low + size > end {
                size >>= 1;
            }
            let mask = !(size - 1) & u64::from(u32::MAX);
            blocks.push((
                u32::try_from(low).unwrap_or(u32::MAX),
                u32::try_from(mask).unwrap_or(u32::MAX),
            ));
            low += size;
        }
        low = end + 1;
    }
    blocks
}
