//! The runtime profile reader (`kind: TrustedRegistry`, `palisade_formats::profiles::parse`).
//!
//! Asserts: no panic; a refused file has at least one offending field, each with a path and a
//! one-line message (the CLI reports them as `DOCKER_PROFILE_INVALID`); an accepted file has
//! at least one profile, names unique and well-formed, every image a plain reference and every
//! pin `sha256:` and 64 lowercase hex digits, every path absolute. Bounded like the others; the
//! reader refuses more than 1 MiB before parsing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_formats::profiles::{self, MAX_PROFILES, valid_image_name};
use palisade_fuzz::{check_field_errors, doc_examples, write_seeds};

const SEED: &str = "apiVersion: loopwright.dev/v1alpha1\nkind: TrustedRegistry\nmetadata:\n  name: local\n  labels: {team: infra}\nspec:\n  runtimeProfiles:\n    - name: build\n      image: palisade-build:1\n      imageId: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n      readOnlyPaths: [/opt/toolchain]\n      budgets: {timeoutSeconds: 600, memoryMiB: 512}\n    - name: test\n      image: registry.local/test:2\n      digest: sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\n  egressBridge: /usr/local/lib/palisade/palisade-bridge\n";

fuzz_target!(
    init: {
        let examples = doc_examples("kind: TrustedRegistry");
        write_seeds(std::iter::once(SEED.as_bytes().to_vec()).chain(examples.into_iter().map(String::into_bytes)));
    },
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        match profiles::parse(text) {
            Err(errors) => {
                assert!(!errors.is_empty());
                assert!(!errors.summary().chars().any(char::is_control));
                check_field_errors(&errors.into_listed());
            }
            Ok((list, bridge)) => {
                assert!(!list.is_empty() && list.len() <= MAX_PROFILES);
                for (i, profile) in list.iter().enumerate() {
                    assert!(!profile.name.is_empty() && profile.name.len() <= 64);
                    assert!(!list[..i].iter().any(|p| p.name == profile.name));
                    assert!(valid_image_name(&profile.image) && !profile.image.contains('@'));
                    if let Some(pin) = &profile.pin {
                        assert!(palisade_shims::docker::valid_image_id(pin), "{pin:?}");
                    }
                    assert!(profile.read_only_paths.iter().all(|p| p.is_absolute()));
                }
                assert!(bridge.is_none_or(|b| b.is_absolute()));
            }
        }
    }
);
