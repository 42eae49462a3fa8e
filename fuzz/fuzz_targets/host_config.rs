//! The host configuration reader (`kind: HostConfig`, `palisade_formats::hostconfig::parse`).
//!
//! Asserts: no panic; a refused file is `HOST_CONFIG_INVALID` with at least one offending field,
//! each with a path and a one-line message, and a one-line summary; an accepted file holds only
//! what the format allows (absolute paths, `/` never writable, bounded lists without repeats,
//! budgets within the taskpack's bounds, ports 1 to 65535). Time and memory per input are bounded
//! by libFuzzer's limits; the reader refuses more than 64 KiB before parsing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_formats::hostconfig::{self, BUDGET_FIELDS, HostConfigError, MAX_PATHS};
use palisade_fuzz::{check_field_errors, doc_examples, one_line, write_seeds};

const SEEDS: [&str; 3] = [
    "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec:\n  sessionKind: managed\n  defaultBackendOrder: [linux-landlock, linux-bwrap]\n  allowDirectDedicated: true\n  allowWorkspaceMode: false\n  writableRoots: [/srv/cache]\n  taskTempDirs: [/var/tmp/tasks]\n  resultsDir: /srv/results\n  dockerRuntimeProfiles: /etc/palisade/profiles.yaml\n  environment:\n    allow: [LANG, LC_*, NPM_TOKEN]\n  budgets: {timeoutSeconds: 600, memoryMiB: 2048, maxProcesses: 128, cpuSeconds: 300}\n",
    "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nmetadata: {name: laptop}\nspec:\n  deniedReadPaths: [~/.private, /srv/keys]\n  exemptDeniedReadPaths: [~/.docker/config.json]\n  loopbackPorts: [5432, 6379]\n  allowHomeWritable: true\n",
    "apiVersion: palisade.dev/v1alpha1\nkind: HostConfig\nspec: {}\n",
];

fuzz_target!(
    init: {
        let examples = doc_examples("kind: HostConfig");
        write_seeds(SEEDS.iter().map(|s| s.as_bytes().to_vec()).chain(examples.into_iter().map(String::into_bytes)));
    },
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        match hostconfig::parse(text, "host.yaml") {
            Err(error) => {
                let HostConfigError::Invalid { errors, summary, .. } = &error else {
                    panic!("parsing refused as something other than invalid: {error}");
                };
                assert!(!errors.is_empty(), "refused without an offending field");
                check_field_errors(errors);
                one_line(summary);
                one_line(&error.to_string());
            }
            Ok(spec) => {
                for list in [&spec.writable_roots, &spec.task_temp_dirs].into_iter().flatten() {
                    assert!(list.len() <= MAX_PATHS);
                    for (i, path) in list.iter().enumerate() {
                        assert!(path.starts_with('/') && path != "/", "{path:?}");
                        assert!(!list[..i].contains(path), "repeated {path:?}");
                    }
                }
                if let Some(dir) = &spec.results_dir {
                    assert!(dir.starts_with('/') && dir != "/");
                }
                if let Some(ports) = &spec.loopback_ports {
                    assert!(ports.iter().all(|p| *p != 0));
                }
                if let Some(order) = &spec.default_backend_order {
                    assert!(!order.is_empty());
                    for (i, b) in order.iter().enumerate() {
                        assert!(!order[..i].contains(b));
                    }
                }
                for (field, max) in BUDGET_FIELDS {
                    if let Some(value) = spec.budgets.get(field) {
                        assert!((1..=max).contains(&value), "{field} = {value}");
                    }
                }
            }
        }
    }
);
