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
/// cartesian product. "None of these values" becomes one entry with an `SCMP_CMP_NE` per
/// value, which compares all 64 bits: junk in the high half makes the call *denied*, never
/// allowed. Only `arch` is listed: libseccomp gives any other ABI — i386, and x32, whose
/// numbers it tells apart from x86_64's — the profile's bad-architecture action, so no second
/// syscall table slips past the rules.
///
/// # Errors
/// As [`build_for`](super::build_for).
pub fn oci_profile(arch: Arch, profile: &Profile) -> Result<serde_json::Value, SeccompError> {
    use serde_json::json;
    let mut entries = Vec::new();
    for rule in rule_set(profile)? {
        if rule.syscall.number(arch).is_none() {
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
            Action::Allow => ("SCMP_ACT_ALLOW", None),
        };
        for args in combinations {
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
        Test::NotIn { arg, values, .. } => vec![
            values
                .iter()
                .map(|(value, _)| json!({"index": arg, "value": value, "valueTwo": 0, "op": "SCMP_CMP_NE"}))
                .collect(),
        ],
    })
}
