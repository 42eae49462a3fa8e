//! `palisade doctor`: every backend probed afresh, the host configuration and the engine.

use palisade_engine::{Backend, BackendProbe};

use crate::exit::Exit;
use crate::facts;
use crate::probe;

use super::args::DoctorArgs;
use super::engine::load_runtime;
use super::setup::{facts_failure, host_setup_deferring_profile, probe_options};
use super::{CommandResult, write_stdout};

/// `palisade doctor`.
pub fn doctor(args: &DoctorArgs) -> CommandResult {
    let (setup, profile_problem) = host_setup_deferring_profile(&args.host)?;
    let config = &setup.config;
    let host = facts::gather(&setup.facts).map_err(facts_failure)?;
    // Doctor always probes afresh (and refreshes the cache for later `decide`/`run`). An
    // unusable runtime profile is shown as the reason docker is unavailable here; `decide` and
    // `run` refuse it themselves.
    let mut probes = probe::probe_all(&probe_options(&args.host, &setup, false)?);
    if let Some(failure) = &profile_problem {
        for probe in probes
            .probes
            .iter_mut()
            .filter(|p| p.backend == Backend::Docker)
        {
            *probe = BackendProbe {
                available: false,
                reason: format!("{}: {}", failure.code.as_str(), failure.message),
                capabilities: Vec::new(),
                network_modes: Vec::new(),
                network_bridge: false,
                limitations: Vec::new(),
                ..probe.clone()
            };
        }
    }
    let engine = load_runtime(None, setup.cache.as_ref().map(|c| c.path.as_path())).ok();
    let mut out = String::new();
    if args.json {
        let value = serde_json::json!({
            "host": host,
            "probes": probes.probes,
            "probeMillis": u64::try_from(probes.elapsed.as_millis()).unwrap_or(u64::MAX),
            "hostConfig": config.record(),
            "engine": engine.as_ref().map(|e| serde_json::json!({
                "componentSha256": e.component_sha256(),
                "determinism": e.settings(),
            })),
        });
        out.push_str(&value.to_string());
        out.push('\n');
    } else {
        out.push_str(&format!(
            "host      {} {}, session {}, uid {}, workspace {}\n",
            host.os,
            host.arch,
            host.session_kind.as_str(),
            facts::current_uid(),
            host.workspace_dir
        ));
        out.push_str(&config.render_text());
        if let Some(engine) = &engine {
            out.push_str(&format!(
                "engine    component sha256:{} on wasmtime {}\n",
                engine.component_sha256(),
                engine.settings().wasmtime_version
            ));
        }
        out.push_str(&format!(
            "probed    {} backends in {} ms\n\n",
            probes.probes.len(),
            probes.elapsed.as_millis()
        ));
        out.push_str(&format!(
            "{:<17} {:<10} {:<22} {:<44} {}\n",
            "BACKEND", "AVAILABLE", "VERSION", "NETWORK MODES", "CAPABILITIES / REASON"
        ));
        for p in &probes.probes {
            let mut modes: Vec<&str> = p.network_modes.iter().map(|m| m.as_str()).collect();
            if p.network_bridge {
                modes.push("domains");
            }
            let caps: Vec<&str> = p.capabilities.iter().map(|c| c.as_str()).collect();
            // Available, but the negotiation skips it unless the host opts in.
            let opt_in_only = p.available
                && p.backend == palisade_engine::Backend::DirectDedicated
                && !host.allow_direct_dedicated;
            let detail = if opt_in_only {
                format!(
                    "{}; selectable only by opt-in (`--allow-direct-dedicated` or `allowDirectDedicated: true`)",
                    caps.join(", ")
                )
            } else if p.available {
                caps.join(", ")
            } else {
                p.reason.clone()
            };
            out.push_str(&format!(
                "{:<17} {:<10} {:<22} {:<44} {}\n",
                p.backend.as_str(),
                if opt_in_only {
                    "opt-in"
                } else if p.available {
                    "yes"
                } else {
                    "no"
                },
                if p.version.is_empty() {
                    "-"
                } else {
                    p.version.as_str()
                },
                if p.available {
                    modes.join(", ")
                } else {
                    "-".to_owned()
                },
                detail
            ));
            for limitation in &p.limitations {
                out.push_str(&format!(
                    "{:<17} {:<10} {:<22} {:<44} limit: {limitation}\n",
                    "", "", "", ""
                ));
            }
        }
    }
    if !args.json {
        out.push_str("\nNETWORK MODES, AS APPLIED HERE\n");
        for p in probes.probes.iter().filter(|p| p.available) {
            let mut label = p.backend.as_str();
            let mut modes: Vec<&str> = p.network_modes.iter().map(|m| m.as_str()).collect();
            if p.network_bridge {
                modes.push("domains");
            }
            for mode in modes {
                out.push_str(&format!(
                    "{label:<17} {mode:<15} {}\n",
                    mode_meaning(p.backend, mode, p.network_bridge)
                ));
                label = "";
            }
        }
    }
    write_stdout(out.as_bytes())?;
    Ok(Exit::Success)
}

/// What a network mode is on a backend, in one line (README "Network modes" says the same).
fn mode_meaning(backend: Backend, mode: &str, bridge: bool) -> &'static str {
    match (backend, mode) {
        (Backend::LinuxBwrap | Backend::Docker, "none") => {
            "own network namespace; no IP socket at all (Unix sockets only); no vsock"
        }
        (Backend::LinuxBwrap | Backend::Docker, "loopback-only") if bridge => {
            "own 127.0.0.1 and ::1; listed loopbackPorts reach the host's (TCP, via Palisade's bridge); nothing else of the host"
        }
        (Backend::LinuxBwrap | Backend::Docker, "loopback-only") => {
            "own 127.0.0.1 and ::1 only; no network bridge here, so no loopbackPorts"
        }
        (Backend::LinuxBwrap, "allow-outbound") => "the host's network namespace; no vsock",
        (Backend::Docker, "allow-outbound") => "`--network host`: the host's network; no vsock",
        (Backend::LinuxBwrap | Backend::Docker, "domains") => {
            "own namespace; out only through the filtering proxy to allowedDomains"
        }
        (Backend::LinuxLandlock, "none") => {
            "no TCP bind or connect (landlock), no socket of any family (seccomp)"
        }
        (Backend::LinuxLandlock, "allow-outbound") => {
            "the host's network: IP and route netlink only; no Unix sockets but socketpair, no vsock"
        }
        (Backend::MacosSeatbelt, "none") => "no network at all",
        (Backend::MacosSeatbelt, "loopback-only") => {
            "the host's own loopback, every port (no network namespace); loopbackPorts refused"
        }
        (Backend::MacosSeatbelt, "allow-outbound") => "unrestricted network",
        (Backend::DirectDedicated, _) => "the host's network, unconfined",
        _ => "not offered",
    }
}
