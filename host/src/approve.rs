//! Approvals at run time (`palisade run --approve-with CMD`): the filtering proxy asks the
//! user's approver about a name outside the allowlist while the connection waits.
//!
//! For each question Palisade runs `/bin/sh -c CMD` on the host, as the user who runs
//! Palisade, in a process group of its own, with one line of JSON on its standard input:
//!
//! ```json
//! {"runId":"…","host":"api.example.com","port":443,"method":"CONNECT","client":"pid=… uid=… gid=…","command":["cargo","build"]}
//! ```
//!
//! `client` is the proxy's client as it saw it (under bwrap and docker, the sandbox's bridge,
//! which relays for every process of the run); `command` is the command the run launched.
//! The first line of its standard output is the answer: `once` (this connection), `run` (this
//! and every later connection to the same name and port, until the run ends) or `deny`.
//! Anything else, an approver that cannot start or exits without answering, and no answer
//! within the timeout are each a deny, with the reason recorded. Once it has answered (or the
//! timeout ran out) the approver's process group is killed, and so is every approver still
//! being asked when the run ends: no approver outlives its question or its run. Its standard
//! error is Palisade's.
//!
//! Approved names go through the proxy's address checks like listed ones: an approval never
//! reaches a private, loopback or metadata address that no IP-literal entry allows. The
//! decision does not change (it still replays); the answers are in the run's outcome.

use std::time::Duration;

/// How long a connection waits for an answer when `--approve-timeout` is not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// An approver command, as `--approve-with` gives it.
#[derive(Debug)]
pub struct CommandApprover {
    /// Run with `/bin/sh -c`.
    pub command: String,
    pub run_id: String,
    /// The command the run launched.
    pub run_command: Vec<String>,
    pub timeout: Duration,
    /// Process groups of the approvers being asked right now.
    asking: std::sync::Mutex<std::collections::BTreeSet<u32>>,
    /// The run is over ([`CommandApprover::stop_asking`]).
    stopped: std::sync::atomic::AtomicBool,
}

impl CommandApprover {
    pub fn new(
        command: String,
        run_id: String,
        run_command: Vec<String>,
        timeout: Duration,
    ) -> CommandApprover {
        CommandApprover {
            command,
            run_id,
            run_command,
            timeout,
            asking: std::sync::Mutex::default(),
            stopped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn asking(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<u32>> {
        self.asking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Kills every approver still being asked (the run is over: its connections are gone), so
    /// that none outlives the run; each question ends as a deny.
    pub fn stop_asking(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for pgid in self.asking().iter() {
            if let Ok(pgid) = i32::try_from(*pgid) {
                let _ = palisade_shims::signals::kill_process_group(pgid);
            }
        }
    }
}

/// Asking the approver: Linux only, where the filtering proxy runs.
#[cfg(target_os = "linux")]
mod ask {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::os::unix::process::CommandExt as _;
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    use palisade_proxy::{ApprovalAnswer, ApprovalRequest, Approver};

    use super::CommandApprover;

    /// The longest answer line read; an approver that writes more has not answered.
    const MAX_ANSWER: u64 = 256;

    /// The request as the approver reads it.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Question<'a> {
        run_id: &'a str,
        host: &'a str,
        port: u16,
        method: &'a str,
        client: &'a str,
        command: &'a [String],
    }

    impl Approver for CommandApprover {
        fn ask(&self, request: &ApprovalRequest) -> (ApprovalAnswer, String) {
            let question = Question {
                run_id: &self.run_id,
                host: &request.host,
                port: request.port,
                method: &request.method,
                client: &request.peer,
                command: &self.run_command,
            };
            let line = match serde_json::to_string(&question) {
                Ok(line) => line + "\n",
                Err(e) => return deny(format!("cannot write the request: {e}")),
            };
            let mut child = match Command::new("/bin/sh")
                .arg("-c")
                .arg(&self.command)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .process_group(0)
                .spawn()
            {
                Ok(child) => child,
                Err(e) => return deny(format!("the approver could not start: {e}")),
            };
            self.asking().insert(child.id());
            // An approver that never reads its input must not block this thread: the request is
            // far smaller than a pipe's buffer, and a write error (it exited) is its own answer.
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(line.as_bytes());
            }
            let answer = read_answer(&mut child, self.timeout);
            // The group is killed and taken off the list before its leader is reaped, so
            // neither this nor `stop_asking` can signal a group id that was reused.
            kill_group(&child);
            self.asking().remove(&child.id());
            let _ = child.wait();
            match answer {
                Read::Line(text) => parse(&text),
                Read::Nothing if self.stopped.load(std::sync::atomic::Ordering::SeqCst) => {
                    deny("the run ended before it answered; the approver was killed".to_owned())
                }
                Read::Nothing => deny("the approver exited without answering".to_owned()),
                Read::TimedOut => deny(format!(
                    "no answer within {} ms; the approver was killed",
                    self.timeout.as_millis()
                )),
            }
        }
    }

    enum Read {
        Line(String),
        Nothing,
        TimedOut,
    }

    /// The approver's first line of output, waiting at most `timeout`.
    fn read_answer(child: &mut Child, timeout: Duration) -> Read {
        let Some(stdout) = child.stdout.take() else {
            return Read::Nothing;
        };
        let (sender, receiver) = mpsc::channel();
        // The reader ends when the approver's group is killed (its pipe closes), so it never
        // outlives the question by more than that.
        let reader = std::thread::Builder::new()
            .name("approver-answer".to_owned())
            .spawn(move || {
                let mut line = String::new();
                let read = BufReader::new(stdout.take(MAX_ANSWER)).read_line(&mut line);
                let _ = sender.send(match read {
                    Ok(0) | Err(_) => Read::Nothing,
                    Ok(_) => Read::Line(line),
                });
            });
        if reader.is_err() {
            return Read::Nothing;
        }
        receiver.recv_timeout(timeout).unwrap_or(Read::TimedOut)
    }

    /// Kills the approver's process group (the approver is not reaped yet, so the id is
    /// still its group's).
    fn kill_group(child: &Child) {
        if let Ok(pgid) = i32::try_from(child.id()) {
            let _ = palisade_shims::signals::kill_process_group(pgid);
        }
    }

    fn parse(line: &str) -> (ApprovalAnswer, String) {
        let word = line.trim().to_ascii_lowercase();
        match word.as_str() {
            "once" => (ApprovalAnswer::Once, "answered once".to_owned()),
            "run" => (ApprovalAnswer::Run, "answered run".to_owned()),
            "deny" => (ApprovalAnswer::Deny, "answered deny".to_owned()),
            _ => {
                let shown: String = line
                    .trim()
                    .chars()
                    .take(64)
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect();
                deny(format!(
                    "answered `{shown}`, which is not once, run or deny"
                ))
            }
        }
    }

    fn deny(detail: String) -> (ApprovalAnswer, String) {
        (ApprovalAnswer::Deny, detail)
    }

    #[cfg(test)]
    mod tests {
        #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

        use super::*;

        fn approver(command: &str, timeout: Duration) -> CommandApprover {
            CommandApprover::new(
                command.to_owned(),
                "run-1".to_owned(),
                vec!["curl".to_owned(), "x".to_owned()],
                timeout,
            )
        }

        fn request() -> ApprovalRequest {
            ApprovalRequest {
                host: "ask.test".to_owned(),
                port: 443,
                method: "CONNECT".to_owned(),
                peer: "pid=1 uid=0 gid=0".to_owned(),
            }
        }

        #[test]
        fn answers_are_read_from_the_first_line() {
            let second = Duration::from_secs(5);
            for (script, answer) in [
                ("echo once", ApprovalAnswer::Once),
                ("echo RUN; echo deny", ApprovalAnswer::Run),
                ("echo ' deny '", ApprovalAnswer::Deny),
                ("echo maybe", ApprovalAnswer::Deny),
                ("exit 3", ApprovalAnswer::Deny),
                ("/nonexistent/approver", ApprovalAnswer::Deny),
            ] {
                assert_eq!(
                    approver(script, second).ask(&request()).0,
                    answer,
                    "{script}"
                );
            }
            let (_, detail) = approver("echo maybe", second).ask(&request());
            assert!(detail.contains("`maybe`"), "{detail}");
        }

        #[test]
        fn the_approver_reads_the_request_as_one_json_line() {
            let dir = tempfile::tempdir().unwrap();
            let seen = dir.path().join("seen");
            let script = format!("cat > '{}'; echo once", seen.display());
            let (answer, _) = approver(&script, Duration::from_secs(5)).ask(&request());
            assert_eq!(answer, ApprovalAnswer::Once);
            let text = std::fs::read_to_string(&seen).unwrap();
            assert!(
                text.ends_with('\n') && text.lines().count() == 1,
                "{text:?}"
            );
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value["host"], "ask.test");
            assert_eq!(value["port"], 443);
            assert_eq!(value["runId"], "run-1");
            assert_eq!(value["method"], "CONNECT");
            assert_eq!(value["command"], serde_json::json!(["curl", "x"]));
        }

        #[test]
        fn an_approver_still_asked_when_the_run_ends_is_killed() {
            let approver = std::sync::Arc::new(approver("sleep 60", Duration::from_secs(60)));
            let asking = std::sync::Arc::clone(&approver);
            let started = std::time::Instant::now();
            let question = std::thread::spawn(move || asking.ask(&request()));
            while approver.asking().is_empty() {
                assert!(started.elapsed() < Duration::from_secs(10), "never asked");
                std::thread::sleep(Duration::from_millis(10));
            }
            approver.stop_asking();
            let (answer, detail) = question.join().unwrap();
            assert_eq!(answer, ApprovalAnswer::Deny);
            assert!(detail.contains("the run ended"), "{detail}");
            assert!(started.elapsed() < Duration::from_secs(30));
            assert!(approver.asking().is_empty());
        }

        #[test]
        fn an_approver_that_hangs_is_a_deny_and_is_killed() {
            let dir = tempfile::tempdir().unwrap();
            let pid_file = dir.path().join("pid");
            // The group's member that would outlive a kill of the shell alone.
            let script = format!("sleep 60 & echo $! > '{}'; wait", pid_file.display());
            let started = std::time::Instant::now();
            let (answer, detail) = approver(&script, Duration::from_millis(300)).ask(&request());
            assert_eq!(answer, ApprovalAnswer::Deny);
            assert!(detail.contains("no answer within 300 ms"), "{detail}");
            assert!(started.elapsed() < Duration::from_secs(30));
            let pid: i32 = std::fs::read_to_string(&pid_file)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // Killed with its group (a zombie until its parent, the shell's, is gone, then reaped
            // by init): nothing left running.
            let running = || {
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                state
                    .rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().next())
                    .is_some_and(|s| s != "Z" && s != "X")
            };
            // SIGKILL is delivered asynchronously: give it a moment.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while running() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(!running(), "the approver's sleep still runs");
        }
    }
}
