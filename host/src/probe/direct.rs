//! `direct-dedicated`: no sandbox at all, for a dedicated runner (CI). Always present; the
//! engine lets it be chosen only with the host's explicit opt-in.

use palisade_engine::model::{Backend, BackendProbe, Capability, NetworkMode};

pub(crate) fn probe() -> BackendProbe {
    BackendProbe {
        landlock_proc: None,
        backend: Backend::DirectDedicated,
        available: true,
        reason: "present; selectable only by host opt-in".to_owned(),
        capabilities: vec![Capability::ProcessTreeCleanup],
        network_modes: vec![NetworkMode::AllowOutbound],
        network_bridge: false,
        version: String::new(),
        limitations: vec![
            "no filesystem masks".to_owned(),
            "no network isolation".to_owned(),
        ],
    }
}
