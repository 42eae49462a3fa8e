//! What the unit tests share: a decision input around a host (most start from
//! [`HostFacts::linux_cli`]), each test changing only what it is about.

use crate::model::{DecisionInput, HostFacts};

/// An input on `host` with no document, no probes and no flags.
pub(crate) fn input(host: HostFacts) -> DecisionInput {
    DecisionInput {
        document: None,
        document_name: String::new(),
        host,
        probes: vec![],
        narrow_allowed_domains: None,
        execution_mode: None,
        budget_flags: None,
        task_contract: None,
        policy_flags: None,
    }
}
